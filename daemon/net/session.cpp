#include "net/session.hpp"

#include <fcntl.h>
#include <linux/sockios.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstring>

#include "config/config_keys.hpp"
#include "gpumem/shared/fd_passing.hpp"
#include "gpumem/shared/os/pidfd.hpp"
#include "net/peer_process.hpp"
#include "rate_limited_log.hpp"

namespace gpumem::daemon {

namespace asio = boost::asio;
using proto::errc;

namespace {
constexpr std::size_t kMaxFrameSize = sizeof(proto::header) + proto::kMaxPayloadSize;
/// Room for requests while none is large: an idle connection costs little more than this.
constexpr std::size_t kInitialInputSize = 1024;
/// Reply buffer capacity kept after everything was sent; more is given back.
constexpr std::size_t kKeptOutputCapacity = 4096;
// The smallest max_output_bytes the configuration allows must hold what a well-behaved client
// may leave unread: the replies before its requests are held, and the largest reply after.
static_assert(session::kBackpressureBytes + kMaxFrameSize <= kMinOutputBytes);

bool would_block(const std::error_code& error) {
  return error == std::errc::resource_unavailable_try_again ||
         error == std::errc::operation_would_block;
}

// One line per second at most, whatever a flood of misbehaving clients does.
rate_limited_log& misbehaviour_log() {
  static rate_limited_log log(std::chrono::seconds(1));
  return log;
}
}  // namespace

session::session(socket_type socket, books& state, request_handler& handler,
                 const daemon_config& config, on_end ended)
    : socket_(std::move(socket)),
      process_watch_(socket_.get_executor()),
      frame_timer_(socket_.get_executor()),
      books_(state),
      handler_(handler),
      config_(config),
      ended_(std::move(ended)),
      in_(kInitialInputSize) {}

void session::start() {
  socket_.non_blocking(true);
  who_ = peer_credentials(socket_.native_handle());
  state_.client = books_.add_client(who_);
  unique_fd pidfd = peer_pidfd(socket_.native_handle(), who_);
  spdlog::debug("client {} connected: pid {} uid {} gid {}{}", state_.client, who_.pid, who_.uid,
                who_.gid, pidfd ? "" : " (process not visible: watching the socket only)");
  if (pidfd) {
    books_.keep_process(state_.client, pidfd.get());
    watch_process_exit(std::move(pidfd));
  }
  asio::co_spawn(
      socket_.get_executor(), [self = shared_from_this()] { return self->read_loop(); },
      asio::detached);
}

void session::watch_process_exit(unique_fd pidfd) {
  process_watch_.assign(pidfd.release());
  wait_for_process_exit();
}

void session::wait_for_process_exit() {
  // A pidfd becomes readable once the process has exited: the decisive sign, which a forked
  // child holding a copy of the socket cannot hide. The reactor can wake a wait spuriously
  // when descriptors are recycled, so readiness is confirmed before anyone is declared dead.
  process_watch_.async_wait(asio::posix::stream_descriptor::wait_read,
                            [weak = weak_from_this()](const boost::system::error_code& error) {
                              const auto self = weak.lock();
                              if (!self || error || self->stopped_) return;
                              if (os::process_exited(self->process_watch_.native_handle())) {
                                self->stop("process exited");
                              } else {
                                self->wait_for_process_exit();
                              }
                            });
}

bool session::process_exited() noexcept {
  return process_watch_.is_open() && os::process_exited(process_watch_.native_handle());
}

void session::end_of_stream() {
  // A killed client's socket closes as its process exits: that is a death, not a hang-up.
  if (process_exited()) {
    stop("process exited");
    return;
  }
  if (process_watch_.is_open() && books_.end_connection(state_.client)) {
    // The process lives on, and its GPU work may still use what it holds, or it may still hold
    // a lock: the rest of the ledger is kept until the process exits.
    spdlog::info(
        "client {} closed the connection holding device memory or locks: its host memory is "
        "let go, the rest kept until its process exits",
        state_.client);
    books_.write_changes();
    boost::system::error_code ignored;
    socket_.close(ignored);
    frame_timer_.cancel();
    return;
  }
  stop("closed the connection");
}

void session::stop_for(const char* problem) {
  misbehaviour_log().warn("client {} (pid {} uid {}) disconnected: {}", state_.client, who_.pid,
                          who_.uid, problem);
  stop(problem);
}

void session::stop(const char* reason) {
  if (stopped_) return;
  stopped_ = true;
  spdlog::debug("client {} gone: {}", state_.client, reason);
  const bool died = process_exited();
  boost::system::error_code ignored;
  socket_.close(ignored);
  process_watch_.close(ignored);
  frame_timer_.cancel();
  books_.depart(state_.client, died);
  books_.write_changes();
  out_fds_.clear();
  ended_(*this);
}

void session::abandon() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  process_watch_.close(ignored);
  frame_timer_.cancel();
  out_fds_.clear();
}

asio::awaitable<void> session::read_loop() {
  auto self = shared_from_this();
  std::vector<unique_fd> fds;
  bool drained = false;
  while (!stopped_) {
    const std::size_t space = in_.size() - in_filled_;
    std::error_code error;
    const std::size_t received =
        recv_with_fds(socket_.native_handle(), std::span(in_).subspan(in_filled_), fds, error);
    // The reactor reports readiness on edges: wait only once the socket is known to be empty.
    // A read shorter than the room offered took everything queued (as Asio's own speculative
    // reads assume), which saves a recv that would only say EAGAIN.
    drained = would_block(error) || (!error && received < space);
    // A client that closes with replies unread resets the connection: an ordinary end too.
    if (error == std::errc::connection_reset || (!error && received == 0)) {
      end_of_stream();
      break;
    }
    if (error && !would_block(error)) {
      stop_for(error == std::errc::protocol_error ? "sent a truncated control message"
                                                  : "socket error");
      break;
    }
    if (!fds.empty()) {
      // Clients never send descriptors; the bytes that came with them cannot be trusted.
      fds.clear();
      append_error(out_, 0, errc::unexpected_handle, "clients may not send file descriptors");
      flush();
      stop_for("sent a file descriptor");
      break;
    }
    in_filled_ += received;
    for (;;) {
      const std::size_t before = in_filled_;
      const input_state state = handle_frames();
      if (state == input_state::stopped || !flush()) co_return;
      watch_frame_deadline(state, in_filled_ != before);
      if (state != input_state::held) break;
      // Backpressure: the client's next requests wait, in its socket, until it has read
      // enough of its replies; nothing more is built for it meanwhile.
      while (pending_output() >= kBackpressureBytes) {
        if (stopped_for_not_reading()) co_return;
        boost::system::error_code wait_error;
        co_await socket_.async_wait(socket_type::wait_write,
                                    asio::redirect_error(asio::use_awaitable, wait_error));
        if (wait_error || stopped_ || !flush()) co_return;
      }
    }
    size_input();
    if (drained) {
      boost::system::error_code wait_error;
      co_await socket_.async_wait(socket_type::wait_read,
                                  asio::redirect_error(asio::use_awaitable, wait_error));
      if (wait_error) break;
    }
  }
}

session::input_state session::handle_frames() {
  std::size_t consumed = 0;
  input_state state = input_state::empty;
  for (;;) {
    if (consumed == in_filled_) break;
    if (pending_output() >= kBackpressureBytes) {
      state = input_state::held;
      break;
    }
    proto::frame_view frame;
    std::error_code error;
    const auto status =
        proto::parse_frame(std::span(in_).first(in_filled_).subspan(consumed), frame, error);
    if (status == proto::parse_status::incomplete) {
      state = input_state::partial;
      break;
    }
    if (status == proto::parse_status::invalid) {
      // The stream cannot be resynchronised after a bad header: answer, then hang up.
      append_error(out_, 0, static_cast<errc>(error.value()),
                   "bad frame header: " + error.message());
      flush();
      stop_for("sent a bad frame header");
      return input_state::stopped;
    }
    const std::size_t frame_start = out_.size();
    const reply_attachment attach = handler_.handle(state_, frame, out_);
    if (!attach.fds.empty()) queue_attachment(attach, frame_start, frame.head.request_id);
    if (std::exchange(state_.subscribing, false)) stream_events(frame.head.request_id);
    consumed += frame.frame_size();
    if (state_.refused) {
      flush();
      stop_for("refused by the access policy or its quotas");
      return input_state::stopped;
    }
  }
  if (consumed > 0) {
    std::memmove(in_.data(), in_.data() + consumed, in_filled_ - consumed);
    in_filled_ -= consumed;
  }
  return state;
}

void session::size_input() {
  if (in_filled_ == in_.size() && in_.size() < kMaxFrameSize) {
    in_.resize(kMaxFrameSize);
  } else if (in_filled_ <= kInitialInputSize && in_.size() > kInitialInputSize) {
    std::vector<std::byte> smaller(in_.begin(), in_.begin() + kInitialInputSize);
    in_.swap(smaller);
  }
}

void session::watch_frame_deadline(input_state state, bool consumed) {
  if (state != input_state::partial) {
    partial_ = false;
    return;
  }
  if (partial_ && !consumed) return;  // the same request, still arriving
  partial_ = true;
  partial_since_ = std::chrono::steady_clock::now();
  frame_timer_.expires_at(partial_since_ + config_.frame_deadline);
  frame_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& error) {
    const auto self = weak.lock();
    // A wait that completed just before its request did is told apart by the clock.
    if (!self || error || self->stopped_ || !self->partial_ ||
        std::chrono::steady_clock::now() < self->partial_since_ + self->config_.frame_deadline) {
      return;
    }
    self->stop_for("a request stalled halfway for longer than frame_deadline");
  });
}

void session::queue_attachment(const reply_attachment& attach, std::size_t frame_start,
                               std::uint32_t request_id) {
  // The owners keep their descriptors; the queue owns duplicates until they are sent.
  std::vector<unique_fd> copies;
  for (const int fd : attach.fds) {
    copies.emplace_back(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!copies.back()) {
      out_.resize(frame_start);
      append_error(out_, request_id, errc::internal, std::string("dup: ") + std::strerror(errno));
      return;
    }
  }
  for (auto& copy : copies) out_fds_.push_back({frame_start, std::move(copy)});
}

void session::stream_events(std::uint32_t request_id) {
  event_request_ = request_id;
  books_.events.set_waker(state_.client, [weak = weak_from_this()] {
    const auto self = weak.lock();
    if (!self || std::exchange(self->pump_posted_, true)) return;
    // Events are published from inside other requests and departures: they go out after.
    asio::post(self->socket_.get_executor(), [self] {
      self->pump_posted_ = false;
      self->pump_events();
    });
  });
}

void session::pump_events() {
  // Events are taken only while everything before them went out, so a subscriber that does
  // not read holds at most one batch here, and the rest waits (or is dropped) in its queue.
  std::vector<proto::event_record> batch;
  while (!stopped_ && !waiting_to_write_ && pending_output() == 0) {
    batch.clear();
    books_.events.take(state_.client, kEventsPerBatch, batch);
    if (batch.empty()) return;
    for (const proto::event_record& event : batch) {
      proto::append_frame(out_, proto::reply_type(proto::message_type::subscribe_events),
                          *event_request_, event);
    }
    if (!flush()) return;
  }
}

bool session::stopped_for_not_reading() {
  int unread = 0;
  if (::ioctl(socket_.native_handle(), SIOCOUTQ, &unread) != 0) unread = 0;
  if (pending_output() + static_cast<std::size_t>(unread) <= config_.max_output_bytes) {
    return false;
  }
  stop_for("not reading its replies");
  return true;
}

bool session::flush() {
  // Nothing a reply tells a client may be lost by a crash after it went out.
  books_.write_changes();
  if (waiting_to_write_) return true;
  while (out_sent_ < out_.size()) {
    std::size_t end = out_.size();
    std::vector<int> fds;
    auto next = out_fds_.begin();
    for (; next != out_fds_.end() && next->offset == out_sent_; ++next)
      fds.push_back(next->fd.get());
    if (next != out_fds_.end()) end = next->offset;
    std::error_code error;
    const std::size_t sent = send_with_fds(
        socket_.native_handle(), std::span(out_).subspan(out_sent_, end - out_sent_), fds, error);
    if (would_block(error)) {
      if (stopped_for_not_reading()) return false;
      waiting_to_write_ = true;
      socket_.async_wait(socket_type::wait_write,
                         [self = shared_from_this()](const boost::system::error_code& wait_error) {
                           self->waiting_to_write_ = false;
                           if (wait_error || self->stopped_ || !self->flush()) return;
                           if (self->event_request_) self->pump_events();
                         });
      return true;
    }
    if (error == std::errc::broken_pipe || error == std::errc::connection_reset) {
      stop("closed the connection");
      return false;
    }
    if (error) {
      stop_for("socket error while replying");
      return false;
    }
    out_fds_.erase(out_fds_.begin(), next);
    out_sent_ += sent;
  }
  out_.clear();
  out_sent_ = 0;
  if (out_.capacity() > kKeptOutputCapacity) std::vector<std::byte>().swap(out_);
  return true;
}

}  // namespace gpumem::daemon
