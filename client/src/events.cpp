#include "gpumem/events.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>
#include <tuple>
#include <vector>

#include "gpumem/proto/codec.hpp"
#include "gpumem/shared/fd_passing.hpp"
#include "transport.hpp"

namespace gpumem {

using proto::message_type;

namespace {
Event to_event(const proto::event_record& record) {
  const proto::message_info* refused = record.kind == proto::event_kind::refused
                                           ? proto::find_request(record.request_type)
                                           : nullptr;
  // The wire's kinds after `subscribed` are EventKind's, in order.
  return {.sequence = record.sequence,
          .time = std::chrono::system_clock::time_point(std::chrono::milliseconds(record.time_ms)),
          .kind = static_cast<EventKind>(static_cast<std::uint32_t>(record.kind) - 1),
          .client = record.client_id,
          .pid = record.pid,
          .uid = record.uid,
          .label = std::string(record.label.view()),
          .bytes = record.bytes,
          .count = record.count,
          .code = static_cast<errc>(record.code),
          .request = refused != nullptr ? refused->name : "",
          .object = std::string(record.object.view()),
          .reason = record.reason};
}
static_assert(static_cast<std::uint32_t>(proto::event_kind::lost) - 1 ==
              static_cast<std::uint32_t>(EventKind::lost));
}  // namespace

const char* to_string(EventKind kind) noexcept {
  return proto::to_string(static_cast<proto::event_kind>(static_cast<std::uint32_t>(kind) + 1));
}

/// The subscribed connection and the bytes read from it that no event was made of yet.
struct EventStream::state {
  unique_fd socket;
  std::uint32_t request_id = 0;
  std::string path;
  bool every_uid = false;
  std::vector<std::byte> in =
      std::vector<std::byte>(sizeof(proto::header) + proto::kMaxPayloadSize);
  std::size_t filled = 0;

  /// The next frame's event when a whole frame is in; nullopt when more must be read.
  std::optional<proto::event_record> parse() {
    proto::frame_view frame;
    std::error_code error;
    const auto status = proto::parse_frame(std::span(in).first(filled), frame, error);
    if (status == proto::parse_status::incomplete) return std::nullopt;
    if (status == proto::parse_status::invalid) {
      throw Error(errc::bad_message, "gpumemd sent a bad frame: " + error.message());
    }
    if (frame.head.request_id != request_id || frame.head.fd_count != 0) {
      throw Error(errc::bad_message, "gpumemd's event does not belong to the subscription");
    }
    if (frame.head.type == static_cast<std::uint16_t>(message_type::error)) {
      proto::error_reply refusal{};
      if (proto::decode_payload(frame.payload, refusal)) {
        throw Error(errc::bad_message, "gpumemd sent a malformed error reply");
      }
      throw Error(static_cast<errc>(refusal.code), refusal.text);
    }
    proto::event_record event{};
    if (frame.head.type != proto::reply_type(message_type::subscribe_events) ||
        proto::decode_payload(frame.payload, event)) {
      throw Error(errc::bad_message, "gpumemd sent a malformed event");
    }
    const std::size_t used = frame.frame_size();
    std::memmove(in.data(), in.data() + used, filled - used);
    filled -= used;
    return event;
  }

  /// Reads what the socket has; false when nothing came before @p deadline.
  bool receive(std::chrono::steady_clock::time_point deadline) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
            .count();
    pollfd ready{socket.get(), POLLIN, 0};
    const int result = ::poll(&ready, 1, static_cast<int>(std::max<long long>(left, 0)));
    if (result < 0 && errno != EINTR) {
      throw Error(errc::io_error, std::string("poll: ") + std::strerror(errno));
    }
    if (result <= 0) return false;
    std::vector<unique_fd> fds;
    std::error_code error;
    const std::size_t received =
        recv_with_fds(socket.get(), std::span(in).subspan(filled), fds, error);
    if (error == std::errc::resource_unavailable_try_again) return true;
    if (error == std::errc::connection_reset || (!error && received == 0)) {
      throw Error(errc::connection_closed, "gpumemd at " + path + " ended the event stream");
    }
    if (error) throw Error(errc::io_error, "receiving events from gpumemd: " + error.message());
    if (!fds.empty()) throw Error(errc::unexpected_handle, "gpumemd sent a descriptor with events");
    filled += received;
    return true;
  }

  /// The next event; nullopt at @p deadline.
  std::optional<proto::event_record> next(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      if (auto event = parse()) return event;
      if (!receive(deadline)) return std::nullopt;
    }
  }
};

EventStream EventStream::open(const ConnectOptions& options) {
  // A stream is not resumed on another connection: its events are not kept across restarts.
  ConnectOptions once = options;
  once.reconnect_for = std::chrono::milliseconds(0);
  detail::transport link(once);
  auto opened = std::make_unique<state>();
  opened->path = link.path();
  std::tie(opened->socket, opened->request_id) = link.hand_over();
  std::vector<std::byte> request;
  proto::append_frame(request, static_cast<std::uint16_t>(message_type::subscribe_events),
                      opened->request_id, proto::empty_payload{});
  const auto timeout = once.timeout.count() > 0 ? once.timeout : std::chrono::seconds(60);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::error_code error;
  for (std::span<const std::byte> rest = request; !rest.empty();) {
    rest = rest.subspan(send_with_fds(opened->socket.get(), rest, {}, error));
    if (error == std::errc::resource_unavailable_try_again) {
      pollfd ready{opened->socket.get(), POLLOUT, 0};
      if (::poll(&ready, 1, static_cast<int>(timeout.count())) == 0) {
        throw Error(errc::timed_out, "gpumemd at " + opened->path + " took no subscription");
      }
    } else if (error) {
      throw Error(errc::io_error, "subscribing to gpumemd's events: " + error.message());
    }
  }
  const auto subscribed = opened->next(deadline);
  if (!subscribed) {
    throw Error(errc::timed_out, "gpumemd at " + opened->path + " did not answer the subscription");
  }
  if (subscribed->kind != proto::event_kind::subscribed) {
    throw Error(errc::bad_message, "gpumemd's first event is not the subscription's answer");
  }
  opened->every_uid = (subscribed->flags & proto::kEventsOfEveryUid) != 0;
  return EventStream(std::move(opened));
}

EventStream::EventStream(std::unique_ptr<state> opened) : state_(std::move(opened)) {}
EventStream::EventStream(EventStream&&) noexcept = default;
EventStream& EventStream::operator=(EventStream&&) noexcept = default;
EventStream::~EventStream() = default;

std::optional<Event> EventStream::next(std::chrono::milliseconds timeout) {
  const auto event = state_->next(std::chrono::steady_clock::now() + timeout);
  if (!event) return std::nullopt;
  if (event->kind == proto::event_kind::subscribed) {
    throw Error(errc::bad_message, "gpumemd answered the subscription twice");
  }
  return to_event(*event);
}

bool EventStream::every_uid() const noexcept {
  return state_->every_uid;
}

}  // namespace gpumem
