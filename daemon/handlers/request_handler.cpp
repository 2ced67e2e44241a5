#include "handlers/request_handler.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <utility>

#include "handlers/kept_reply.hpp"
#include "policy/access_policy.hpp"
#include "rate_limited_log.hpp"
#include "request_error.hpp"
#ifdef GPUMEM_WITH_CUDA
#include "gpumem/shared/cuda/driver.hpp"
#endif

namespace gpumem::daemon {

using proto::errc;
using proto::message_type;

namespace {
/// Requests that took longer are logged at debug level, one line each.
constexpr std::chrono::microseconds kSlowRequest{50};

/// Refusals name their client in the log; a client hammering at a refusal gets one line a second
/// for each kind (the request's type and the refusal's code).
rate_limited_log& refusal_log(std::uint16_t request_type, errc code) {
  static rate_limited_logs<std::pair<std::uint16_t, errc>> logs(std::chrono::seconds(1));
  return logs.of({request_type, code});
}
}  // namespace

void append_error(std::vector<std::byte>& out, std::uint32_t request_id, errc code,
                  std::string_view text) {
  proto::append_frame(out, static_cast<std::uint16_t>(message_type::error), request_id,
                      proto::make_error_reply(code, text));
}

reply_attachment request_handler::handle(client_state& client, const proto::frame_view& frame,
                                         std::vector<std::byte>& out) {
  const auto received = std::chrono::steady_clock::now();
  const std::size_t start = out.size();
  reply_attachment attach = answer(client, frame, out);
  count(frame.head.type, std::span(out).subspan(start), received);
  return attach;
}

void request_handler::count(std::uint16_t type, std::span<const std::byte> reply,
                            std::chrono::steady_clock::time_point received) noexcept {
  const auto took = std::chrono::steady_clock::now() - received;
  books_.requests.record(type, took);
  // The histogram says how often a request of a type was slow; the log says which, and when.
  if (took > kSlowRequest) {
    const proto::message_info* known = proto::find_request(type);
    spdlog::debug("a {} request took {} us to answer", known ? known->name : "unknown",
                  std::chrono::duration_cast<std::chrono::microseconds>(took).count());
  }
  // Every reply starts with its header; an error's payload starts with its code.
  if (reply.size() < sizeof(proto::header) + sizeof(proto::error_reply)) return;
  proto::header head;
  std::memcpy(&head, reply.data(), sizeof head);
  if (head.type == static_cast<std::uint16_t>(message_type::error)) {
    std::uint32_t code = 0;
    std::memcpy(&code, reply.data() + sizeof head + offsetof(proto::error_reply, code),
                sizeof code);
    books_.requests.record_error(code);
  }
}

reply_attachment request_handler::answer(client_state& client, const proto::frame_view& frame,
                                         std::vector<std::byte>& out) {
  const auto type = static_cast<message_type>(frame.head.type);
  const auto row = books_.rows.clients().find(client.client);
  // The new connection's mailbox is asked for between the resume and the call sent again.
  if (type != message_type::open_mailbox && std::exchange(client.resumed, false) &&
      row != books_.rows.clients().end()) {
    if (const std::vector<std::byte>* kept = kept_reply(row->second.last_answered, frame.head)) {
      spdlog::debug("client {}: request {} was answered before the restart: sent again",
                    client.client, frame.head.request_id);
      try {
        reply_attachment attach = reattach(*kept);
        out.insert(out.end(), kept->begin(), kept->end());
        return attach;
      } catch (const request_error& error) {
        append_error(out, frame.head.request_id, error.code(), error.what());
        return {};
      }
    }
  }
  const std::size_t start = out.size();
  reply_attachment attach = dispatch(client, frame, out);
  if (client.greeted && keeps_reply(type)) {
    books_.rows.set_answered(client.client, frame.head.request_id, type,
                             std::span(out).subspan(start));
  }
  return attach;
}

reply_attachment request_handler::reattach(const std::vector<std::byte>& kept) const {
  proto::frame_view frame;
  std::error_code error;
  const bool parsed = proto::parse_frame(kept, frame, error) == proto::parse_status::complete;
  if (!parsed || frame.head.fd_count == 0) return {};
  const auto type = static_cast<message_type>(frame.head.type & ~proto::kReplyBit);
  if (type == message_type::reserve || type == message_type::open_reservation) {
    proto::reservation_reply reply{};
    if (!proto::decode_payload(frame.payload, reply) &&
        books_.reservations.find(reply.reservation_id) != nullptr) {
      return {{books_.reservations.notice_fd(reply.reservation_id)},
              proto::handle_type::host_memfd};
    }
  } else if (type == message_type::open_sync || type == message_type::open_channel) {
    proto::sync_open_reply reply{};
    if (!proto::decode_payload(frame.payload, reply)) {
      if (const sync_page* page = books_.sync.page_by_id(reply.page)) {
        return {{page->fd()}, proto::handle_type::host_memfd};
      }
    }
  }
  throw request_error(errc::internal, fmt::format("the kept reply to request {} announces {} "
                                                  "descriptor(s) that are no longer there",
                                                  frame.head.request_id, frame.head.fd_count));
}

reply_attachment request_handler::dispatch(client_state& client, const proto::frame_view& frame,
                                           std::vector<std::byte>& out) {
  const auto id = frame.head.request_id;
  reply_attachment attach;
  if (frame.head.fd_count != 0) {
    append_error(out, id, errc::unexpected_handle, "requests carry no file descriptors");
    return attach;
  }
  const auto type = static_cast<message_type>(frame.head.type);
  if (!client.greeted && type != message_type::hello) {
    append_error(out, id, errc::bad_message, "the first request of a session must be hello");
    return attach;
  }
  const std::size_t rollback = out.size();
  try {
    switch (type) {
#define GPUMEM_X(name, number, request, reply, reply_fd_count, summary)                \
  case message_type::name: {                                                           \
    proto::request message{};                                                          \
    if (auto error = proto::decode_payload(frame.payload, message)) {                  \
      throw request_error(static_cast<errc>(error.value()),                            \
                          fmt::format("{} request: {}", #name, error.message()));      \
    }                                                                                  \
    const auto answer = on_##name(client, message, attach);                            \
    proto::append_frame(out, proto::reply_type(type), id, answer,                      \
                        static_cast<std::uint16_t>(attach.fds.size()), attach.handle); \
    return attach;                                                                     \
  }
      GPUMEM_MESSAGE_TABLE(GPUMEM_X)
#undef GPUMEM_X
      default:
        throw request_error(errc::unknown_message_type,
                            fmt::format("message type {:#x} is not a request", frame.head.type));
    }
  } catch (const request_error& error) {
    if (error.code() == errc::permission_denied || error.code() == errc::quota_exceeded) {
      const client_row& row = books_.rows.client(client.client);
      const proto::message_info* info = proto::find_request(frame.head.type);
      // Types that name no request share one kind: their number is the client's to choose.
      refusal_log(info ? frame.head.type : 0, error.code())
          .warn("refused {} of client {} ({}): {}{}", info ? info->name : "a request",
                client.client, access_policy::describe(row.who, row.label), error.what(),
                error.logged_only().empty() ? std::string()
                                            : " [not told to it: " + error.logged_only() + "]");
      books_.publish_refused(client.client, row.who, row.label, frame.head.type, error);
    } else {
      spdlog::debug("client {}: request {} failed: {}", client.client, id, error.what());
    }
    out.resize(rollback);
    append_error(out, id, error.code(), error.what());
#ifdef GPUMEM_WITH_CUDA
  } catch (const cuda::cuda_error& error) {
    spdlog::error("client {}: request {}: {}", client.client, id, error.what());
    out.resize(rollback);
    append_error(out, id, errc::cuda_error, error.what());
#endif
  } catch (const std::exception& error) {
    spdlog::error("client {}: request {} failed unexpectedly: {}", client.client, id, error.what());
    out.resize(rollback);
    append_error(out, id, errc::internal, error.what());
  }
  return {};
}

}  // namespace gpumem::daemon
