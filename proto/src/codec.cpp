#include "gpumem/proto/codec.hpp"

#include <algorithm>
#include <cstring>

#include "gpumem/proto/mailbox.hpp"

namespace gpumem::proto {

namespace {
std::error_code bad() noexcept {
  return errc::bad_message;
}

bool is_known_access(access_mode mode) noexcept {
  return mode == access_mode::read_write || mode == access_mode::read_only;
}

// The set of types a receiver may see in a header: requests, their replies, and error.
bool is_known_type(std::uint16_t raw) noexcept {
  if (raw == static_cast<std::uint16_t>(message_type::error)) return true;
  return find_request(static_cast<std::uint16_t>(raw & ~kReplyBit)) != nullptr;
}
/// A NUL-terminated printable text that fills at most @p capacity bytes.
bool is_printable_text(const char* text, std::size_t capacity) noexcept {
  const std::size_t length = ::strnlen(text, capacity);
  return length < capacity &&
         std::all_of(text, text + length, [](char c) { return c >= 0x20 && c < 0x7f; });
}
}  // namespace

std::error_code check_header(const header& head) noexcept {
  if (head.magic != kMagic || head.reserved != 0) return bad();
  if (head.version != kProtocolVersion) return errc::unsupported_version;
  if (head.payload_size > kMaxPayloadSize) return bad();
  if (!is_known_type(head.type)) return errc::unknown_message_type;
  if (!is_known_handle_type(head.handle) || head.fd_count > kMaxFdsPerMessage) return bad();
  const bool has_fds = head.fd_count != 0;
  const bool names_handle = head.handle != static_cast<std::uint16_t>(handle_type::none);
  if (has_fds != names_handle) return errc::unexpected_handle;
  return {};
}

parse_status parse_frame(std::span<const std::byte> bytes, frame_view& out,
                         std::error_code& error) noexcept {
  if (bytes.size() < sizeof(header)) return parse_status::incomplete;
  std::memcpy(&out.head, bytes.data(), sizeof(header));
  if ((error = check_header(out.head))) return parse_status::invalid;
  if (bytes.size() - sizeof(header) < out.head.payload_size) return parse_status::incomplete;
  out.payload = bytes.subspan(sizeof(header), out.head.payload_size);
  return parse_status::complete;
}

std::error_code validate(const empty_payload&) noexcept {
  return {};
}

std::error_code validate(const hello_request& m) noexcept {
  if (m.protocol_version != kProtocolVersion) return errc::unsupported_version;
  // A resume names both its session and the token; a new session names neither.
  if ((m.resume_client_id == 0) != m.resume_token.empty()) return bad();
  return check_wire_name(m.client_label, true);
}

std::error_code validate(const hello_reply& m) noexcept {
  const bool sane = m.client_id != 0 && m.max_payload_size == kMaxPayloadSize && !m.token.empty() &&
                    m.daemon_instance != 0;
  return sane ? std::error_code{} : bad();
}

std::error_code validate(const get_pool_request& m) noexcept {
  return m.reserved == 0 ? std::error_code{} : bad();
}

std::error_code validate(const pool_reply& m) noexcept {
  if (m.device < kHostDevice) return bad();
  return check_wire_name(m.name, false);
}

std::error_code validate(const allocate_request& m) noexcept {
  if (!valid_creation_flags(m.flags) || m.device < kHostDevice) return bad();
  if (m.size == 0) return errc::invalid_argument;
  if (auto error = check_wire_name(m.name, true)) return error;
  return check_wire_name(m.pool, true);
}

std::error_code validate(const open_request& m) noexcept {
  if ((m.flags & ~kFlagOwnOnly) != 0 || !is_known_access(m.access)) return bad();
  return check_wire_name(m.name, false);
}

std::error_code validate(const allocation_reply& m) noexcept {
  return m.alloc_id != 0 && m.size != 0 && is_known_access(m.access) ? std::error_code{} : bad();
}

std::error_code validate(const release_request& m) noexcept {
  if (m.reserved != 0 || (m.flags & ~kReleaseHasEvent) != 0) return bad();
  return m.alloc_id != 0 ? std::error_code{} : make_error_code(errc::invalid_argument);
}

std::error_code validate(const list_request&) noexcept {
  return {};
}

std::error_code validate(const list_head& m) noexcept {
  return m.more <= 1 ? std::error_code{} : bad();
}

std::error_code validate(const stats_head&) noexcept {
  return {};
}

std::error_code validate(const pool_stats& m) noexcept {
  if (m.device < kHostDevice) return bad();
  return check_wire_name(m.name, false);
}

std::error_code validate(const usage_record& m) noexcept {
  return m.reserved == 0 ? std::error_code{} : bad();
}

std::error_code validate(const client_record& m) noexcept {
  return check_wire_name(m.label, true);
}

std::error_code validate(const allocation_record& m) noexcept {
  if (m.alloc_id == 0) return bad();
  return check_wire_name(m.name, true);
}

std::error_code validate(const error_reply& m) noexcept {
  if (m.reserved != 0 || !is_known_errc(m.code) || m.code == 0) return bad();
  return is_printable_text(m.text, kErrorTextCapacity) ? std::error_code{} : bad();
}

std::error_code validate(const reserve_request& m) noexcept {
  if (!valid_creation_flags(m.flags) || m.device < kHostDevice) return bad();
  if (m.max_size == 0 || m.initial_size > m.max_size) return errc::invalid_argument;
  return check_wire_name(m.name, true);
}

namespace {
bool is_known_state(reservation_state state) noexcept {
  return static_cast<std::uint32_t>(state) < kReservationStates;
}
}  // namespace

std::error_code validate(const reservation_reply& m) noexcept {
  const bool sane = m.reservation_id != 0 && m.chunk_size != 0 && m.committed <= m.max_size &&
                    m.device >= kHostDevice && is_known_access(m.access) && m.version != 0;
  return sane ? std::error_code{} : bad();
}

std::error_code validate(const resize_request& m) noexcept {
  return m.reservation_id != 0 ? std::error_code{} : make_error_code(errc::invalid_argument);
}

std::error_code validate(const chunks_request& m) noexcept {
  if (m.which != chunk_set::current && m.which != chunk_set::draft) return bad();
  if (m.reservation_id == 0 || (m.first == 0) != (m.version == 0)) return errc::invalid_argument;
  return {};
}

std::error_code validate(const chunks_head& m) noexcept {
  const bool sane =
      m.more <= 1 && m.count <= kMaxFdsPerMessage && is_known_state(m.state) && m.version != 0;
  return sane ? std::error_code{} : bad();
}

std::error_code validate(const chunk_record& m) noexcept {
  return m.chunk_id != 0 ? std::error_code{} : bad();
}

std::error_code validate(const reservation_release_request& m) noexcept {
  return m.reservation_id != 0 ? std::error_code{} : make_error_code(errc::invalid_argument);
}

std::error_code validate(const begin_version_request& m) noexcept {
  return m.reservation_id != 0 ? std::error_code{} : make_error_code(errc::invalid_argument);
}

std::error_code validate(const version_request& m) noexcept {
  return m.reservation_id != 0 && m.version != 0 ? std::error_code{}
                                                 : make_error_code(errc::invalid_argument);
}

std::error_code validate(const reservation_target& m) noexcept {
  if (m.reservation_id != 0) return check_wire_name(m.name, true);
  return check_wire_name(m.name, false);
}

std::error_code validate(const sleep_request& m) noexcept {
  if ((m.flags & ~kSleepDiscard) != 0) return bad();
  return validate(m.target);
}

std::error_code validate(const reservation_status& m) noexcept {
  const bool sane = m.reservation_id != 0 && is_known_state(m.state) && m.busy <= 1 &&
                    is_known_errc(m.error) && is_printable_text(m.reason, kReasonCapacity);
  return sane ? std::error_code{} : bad();
}

std::error_code validate(const reservation_record& m) noexcept {
  if (m.reservation_id == 0 || m.device < kHostDevice || m.committed > m.max_size ||
      !is_known_state(m.state) || m.reserved != 0) {
    return bad();
  }
  return check_wire_name(m.name, true);
}

namespace {
bool is_known_kind(sync_kind kind) noexcept {
  return kind == sync_kind::lock || kind == sync_kind::barrier || kind == sync_kind::channel;
}
}  // namespace

std::error_code validate(const sync_attach_reply& m) noexcept {
  return m.slot != 0 && m.cell_size != 0 && m.cell_count != 0 ? std::error_code{} : bad();
}

std::error_code validate(const sync_open_request& m) noexcept {
  if (!valid_creation_flags(m.flags & ~(kFlagSendPage | kFlagOwnOnly)) || !is_known_kind(m.kind)) {
    return bad();
  }
  if (static_cast<std::uint32_t>(m.role) > static_cast<std::uint32_t>(sync_role::consumer)) {
    return bad();
  }
  const bool counters = m.kind != sync_kind::lock;
  const bool role_fits =
      m.kind == sync_kind::channel ? m.role != sync_role::party : m.role == sync_role::party;
  if (!role_fits || (counters && m.parties < (m.kind == sync_kind::channel ? 2u : 1u)) ||
      (!counters && m.parties != 0)) {
    return errc::invalid_argument;
  }
  return check_wire_name(m.name, false);
}

std::error_code validate(const sync_open_reply& m) noexcept {
  return m.parties == 0 || m.party < m.parties ? std::error_code{} : bad();
}

std::error_code validate(const channel_open_request& m) noexcept {
  // The layout's numbers are the daemon's to judge, which names the channel when it refuses.
  if (m.open.kind != sync_kind::channel || m.layout.reserved != 0) return bad();
  return validate(m.open);
}

std::error_code validate(const sync_close_request&) noexcept {
  return {};
}

std::error_code validate(const sync_reset_request& m) noexcept {
  if (m.reserved != 0) return bad();
  return check_wire_name(m.name, false);
}

std::error_code validate(const sync_record& m) noexcept {
  if (m.sync_id == 0 || !is_known_kind(m.kind)) return bad();
  return check_wire_name(m.name, false);
}

std::error_code validate(const signal_page_request& m) noexcept {
  return m.device >= 0 ? std::error_code{} : make_error_code(errc::no_such_device);
}

std::error_code validate(const signal_page_reply& m) noexcept {
  return m.size != 0 && m.device >= 0 && m.cell_size != 0 ? std::error_code{} : bad();
}

std::error_code validate(const sync_page_request& m) noexcept {
  return m.reserved == 0 ? std::error_code{} : bad();
}

std::error_code validate(const sync_page_reply& m) noexcept {
  return m.cell_size != 0 && m.cell_count != 0 && m.reserved == 0 ? std::error_code{} : bad();
}

std::error_code validate(const event_record& m) noexcept {
  const bool sane = static_cast<std::uint32_t>(m.kind) < kEventKinds &&
                    (m.flags & ~kEventsOfEveryUid) == 0 && m.reserved == 0 &&
                    is_known_errc(m.code) && is_printable_text(m.reason, kReasonCapacity);
  if (!sane) return bad();
  if (auto error = check_wire_name(m.label, true)) return error;
  return check_wire_name(m.object, true);
}

std::error_code validate(const metrics_request& m) noexcept {
  return m.reserved == 0 && (m.snapshot != 0 || m.offset == 0) ? std::error_code{} : bad();
}

std::error_code validate(const mailbox_reply& m) noexcept {
  return m.bytes == kMailboxBytes && m.reserved == 0 ? std::error_code{} : bad();
}

std::error_code validate(const metrics_head& m) noexcept {
  const bool sane = m.snapshot != 0 && m.more <= 1 && m.offset <= m.total &&
                    m.count <= m.total - m.offset &&
                    (m.more == 0) == (m.offset + m.count == m.total);
  return sane ? std::error_code{} : bad();
}

std::error_code validate(const char& text_byte) noexcept {
  return text_byte == '\n' || (text_byte >= 0x20 && text_byte < 0x7f) ? std::error_code{} : bad();
}

error_reply make_error_reply(errc code, std::string_view text) noexcept {
  error_reply reply{};
  reply.code = static_cast<std::uint32_t>(code);
  const std::size_t length = std::min(text.size(), kErrorTextCapacity - 1);
  std::transform(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(length), reply.text,
                 [](char c) { return c >= 0x20 && c < 0x7f ? c : '?'; });
  return reply;
}

}  // namespace gpumem::proto
