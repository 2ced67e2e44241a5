#pragma once
/// @file
/// @brief Encoding and validating decoding of frames and payloads. No I/O here.
///
/// Decoding never trusts a length: the header is checked before its payload size is used, a
/// payload must be exactly the size its type defines (head plus count records for lists), and
/// every field is validated (names, enums, reserved words zero).

#include <cstddef>
#include <cstring>
#include <span>
#include <system_error>
#include <type_traits>
#include <vector>

#include "gpumem/proto/errc.hpp"
#include "gpumem/proto/messages.hpp"
#include "gpumem/proto/wire.hpp"

namespace gpumem::proto {

/// @brief Checks magic, version, reserved word, payload bound, known type and handle fields.
std::error_code check_header(const header& head) noexcept;

struct frame_view {
  header head;
  std::span<const std::byte> payload;
  std::size_t frame_size() const noexcept { return sizeof(header) + payload.size(); }
};

enum class parse_status { complete, incomplete, invalid };

/// @brief Looks for one frame at the front of @p bytes.
/// A header is rejected as soon as its 24 bytes are there, before any payload arrives, so a
/// hostile length never makes the receiver wait for or buffer more than kMaxPayloadSize.
parse_status parse_frame(std::span<const std::byte> bytes, frame_view& out,
                         std::error_code& error) noexcept;

std::error_code validate(const empty_payload&) noexcept;
std::error_code validate(const hello_request&) noexcept;
std::error_code validate(const hello_reply&) noexcept;
std::error_code validate(const get_pool_request&) noexcept;
std::error_code validate(const pool_reply&) noexcept;
std::error_code validate(const allocate_request&) noexcept;
std::error_code validate(const open_request&) noexcept;
std::error_code validate(const allocation_reply&) noexcept;
std::error_code validate(const release_request&) noexcept;
std::error_code validate(const list_request&) noexcept;
std::error_code validate(const list_head&) noexcept;
std::error_code validate(const stats_head&) noexcept;
std::error_code validate(const pool_stats&) noexcept;
std::error_code validate(const client_record&) noexcept;
std::error_code validate(const allocation_record&) noexcept;
std::error_code validate(const error_reply&) noexcept;
std::error_code validate(const reserve_request&) noexcept;
std::error_code validate(const reservation_reply&) noexcept;
std::error_code validate(const resize_request&) noexcept;
std::error_code validate(const chunks_request&) noexcept;
std::error_code validate(const chunks_head&) noexcept;
std::error_code validate(const chunk_record&) noexcept;
std::error_code validate(const reservation_release_request&) noexcept;
std::error_code validate(const reservation_record&) noexcept;
std::error_code validate(const begin_version_request&) noexcept;
std::error_code validate(const version_request&) noexcept;
std::error_code validate(const reservation_target&) noexcept;
std::error_code validate(const sleep_request&) noexcept;
std::error_code validate(const reservation_status&) noexcept;
std::error_code validate(const sync_attach_reply&) noexcept;
std::error_code validate(const sync_open_request&) noexcept;
std::error_code validate(const sync_open_reply&) noexcept;
std::error_code validate(const channel_open_request&) noexcept;
std::error_code validate(const sync_close_request&) noexcept;
std::error_code validate(const sync_reset_request&) noexcept;
std::error_code validate(const sync_record&) noexcept;
std::error_code validate(const signal_page_request&) noexcept;
std::error_code validate(const signal_page_reply&) noexcept;
std::error_code validate(const sync_page_request&) noexcept;
std::error_code validate(const sync_page_reply&) noexcept;
std::error_code validate(const usage_record&) noexcept;
std::error_code validate(const event_record&) noexcept;
std::error_code validate(const metrics_request&) noexcept;
std::error_code validate(const metrics_head&) noexcept;
std::error_code validate(const mailbox_reply&) noexcept;
/// One byte of metrics text: printable ASCII or a newline.
std::error_code validate(const char& text_byte) noexcept;

/// @brief Builds an error payload; the text is cut to fit and unprintable bytes become '?'.
error_reply make_error_reply(errc code, std::string_view text) noexcept;

template <class T>
inline constexpr bool is_fixed_payload = std::is_trivially_copyable_v<T>;

template <class T>
std::size_t payload_size(const T& payload) noexcept {
  if constexpr (std::is_empty_v<T>) {
    return 0;
  } else if constexpr (is_fixed_payload<T>) {
    return sizeof(T);
  } else {
    return sizeof(payload.head) + payload.records.size() * sizeof(payload.records[0]);
  }
}

namespace detail {
inline void append_bytes(std::vector<std::byte>& out, const void* data, std::size_t size) {
  const auto* first = static_cast<const std::byte*>(data);
  out.insert(out.end(), first, first + size);
}
}  // namespace detail

/// @brief Appends one whole frame (header and payload) to @p out.
template <class T>
void append_frame(std::vector<std::byte>& out, std::uint16_t type, std::uint32_t request_id,
                  const T& payload, std::uint16_t fd_count = 0,
                  handle_type handle = handle_type::none) {
  const header head{kMagic,
                    kProtocolVersion,
                    type,
                    request_id,
                    static_cast<std::uint32_t>(payload_size(payload)),
                    fd_count,
                    static_cast<std::uint16_t>(handle),
                    0};
  detail::append_bytes(out, &head, sizeof head);
  if constexpr (std::is_empty_v<T>) {
    return;
  } else if constexpr (is_fixed_payload<T>) {
    detail::append_bytes(out, &payload, sizeof payload);
  } else {
    detail::append_bytes(out, &payload.head, sizeof payload.head);
    detail::append_bytes(out, payload.records.data(),
                         payload.records.size() * sizeof(payload.records[0]));
  }
}

/// @brief Decodes and validates a payload; @p out is unspecified on error.
template <class T>
std::error_code decode_payload(std::span<const std::byte> bytes, T& out) {
  if constexpr (std::is_empty_v<T>) {
    return bytes.empty() ? std::error_code{} : make_error_code(errc::bad_message);
  } else if constexpr (is_fixed_payload<T>) {
    if (bytes.size() != sizeof(T)) return errc::bad_message;
    std::memcpy(&out, bytes.data(), sizeof(T));
    return validate(out);
  } else {
    using record = typename decltype(out.records)::value_type;
    if (bytes.size() < sizeof(out.head)) return errc::bad_message;
    std::memcpy(&out.head, bytes.data(), sizeof(out.head));
    if (auto error = validate(out.head)) return error;
    const std::size_t count = out.head.count;
    if (count > T::kMaxRecords || bytes.size() != sizeof(out.head) + count * sizeof(record)) {
      return errc::bad_message;
    }
    out.records.resize(count);
    if (count > 0) {
      std::memcpy(out.records.data(), bytes.data() + sizeof(out.head), count * sizeof(record));
    }
    for (const auto& item : out.records) {
      if (auto error = validate(item)) return error;
    }
    return {};
  }
}

}  // namespace gpumem::proto
