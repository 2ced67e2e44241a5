#include "net/session.hpp"

#include <fcntl.h>
#include <linux/sockios.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "config/config_keys.hpp"
#include "gpumem/shared/fd_passing.hpp"
#include "gpumem/shared/os/pidfd.hpp"
#include "net/client_poller.hpp"
#include "net/peer_process.hpp"
#include "net/request_mailbox.hpp"
#include "rate_limited_log.hpp"

namespace gpumem::daemon {

namespace asio = boost::asio;
using proto::errc;

namespace {
using proto::kMaxFrameSize;
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

// One line per second at most for each problem (a text in this file), whatever a flood of
// misbehaving clients does.
rate_limited_log& misbehaviour_log(const char* problem) {
  static rate_limited_logs<std::string> logs(std::chrono::seconds(1));
  return logs.of(problem);
}
}  // namespace

session::session(unique_fd socket, client_poller& poller, books& state, request_handler& handler,
                 const daemon_config& config, on_end ended)
    : socket_(std::move(socket)),
      poller_(poller),
      process_watch_(poller.context()),
      frame_timer_(poller.context()),
      books_(state),
      handler_(handler),
      config_(config),
      ended_(std::move(ended)),
      in_(kInitialInputSize) {}

session::~session() {
  close_socket();
}

void session::start() {
  const int flags = ::fcntl(socket_.get(), F_GETFL);
  if (flags < 0 || ::fcntl(socket_.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    throw std::system_error(errno, std::system_category(), "fcntl O_NONBLOCK");
  }
  who_ = peer_credentials(socket_.get());
  state_.client = books_.add_client(who_);
  unique_fd pidfd = peer_pidfd(socket_.get(), who_);
  spdlog::debug("client {} connected: pid {} uid {} gid {}{}", state_.client, who_.pid, who_.uid,
                who_.gid, pidfd ? "" : " (process not visible: watching the socket only)");
  if (pidfd) {
    books_.keep_process(state_.client, pidfd.get());
    watch_process_exit(std::move(pidfd));
  }
  // Requests already sent are reported at once.
  poller_key_ = poller_.add(socket_.get(), *this);
}

void session::close_socket() noexcept {
  close_mailbox();  // it belongs to the connection
  if (!socket_) return;
  poller_.remove(poller_key_, socket_.get());
  socket_.reset();
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

bool session::closed_cleanly() noexcept {
  if (!closed_cleanly_ && mailbox_) closed_cleanly_ = mailbox_->client_closed_cleanly();
  return closed_cleanly_;
}

void session::end_of_stream() {
  closed_cleanly();
  // A killed client's socket closes as its process exits: that is a death, not a hang-up,
  // unless the library said it was closing (a process that exited before this was read).
  if (process_exited()) {
    stop(closed_cleanly_ ? "closed the connection, and its process has exited" : "process exited");
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
    close_socket();
    frame_timer_.cancel();
    // Replies can no longer go out; the descriptors they carried are let go now.
    out_.clear();
    out_sent_ = 0;
    out_fds_.clear();
    return;
  }
  stop("closed the connection");
}

void session::stop_for(const char* problem) {
  misbehaviour_log(problem).warn("client {} (pid {} uid {}) disconnected: {}", state_.client,
                                 who_.pid, who_.uid, problem);
  stop(problem);
}

void session::reply_then_stop_for(const char* problem) {
  stopping_ = true;
  flush();
  stop_for(problem);
}

void session::stop(const char* reason) {
  if (stopped_) return;
  stopped_ = true;
  spdlog::debug("client {} gone: {}", state_.client, reason);
  // The process's exit may be seen before the end of its stream: the mailbox is read here too.
  const bool died = process_exited() && !closed_cleanly();
  close_socket();
  boost::system::error_code ignored;
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
  close_socket();
  boost::system::error_code ignored;
  process_watch_.close(ignored);
  frame_timer_.cancel();
  out_fds_.clear();
}

void session::note_events(std::uint32_t events) {
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) drained_ = false;
  if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) hung_up_ = true;
  if (events & EPOLLOUT) writable();
}

void session::on_events(std::uint32_t events) {
  note_events(events);
  serve_input();
}

void session::serve_input() {
  std::size_t budget = kFramesPerWakeup;
  while (!stopped_ && !input_held_ && socket_) {
    const std::size_t before = in_filled_;
    const input_state state = handle_frames(budget);
    if (state == input_state::stopped) return;
    watch_frame_deadline(state, in_filled_ != before);
    if (state == input_state::held) {
      // Backpressure: the client's next requests wait, in its socket, until it has read
      // enough of its replies; nothing more is built for it meanwhile.
      if (stopped_for_not_reading()) return;
      input_held_ = true;
      break;
    }
    if (state == input_state::over_budget) {
      poller_.serve_again(poller_key_);
      break;
    }
    size_input();
    if (drained_) break;
    if (budget == 0) {
      poller_.serve_again(poller_key_);  // the socket may hold more
      break;
    }
    // Replies go out before the next read, which may find the end of the stream.
    if (pending_output() > 0 && !flush()) return;
    if (!receive()) return;
  }
  if (!stopped_ && pending_output() > 0) flush_soon();
}

bool session::receive() {
  const std::size_t room = in_.size() - in_filled_;
  std::error_code error;
  const std::size_t received =
      recv_with_fds(socket_.get(), std::span(in_).subspan(in_filled_), received_fds_, error);
  return apply_received(room, received, error);
}

bool session::apply_received(std::size_t room, std::size_t received, const std::error_code& error) {
  // Input events come on edges: the socket must be known empty before waiting for the next.
  // A read shorter than the room offered took everything queued (a Unix stream socket hands
  // over all it holds, up to the room offered), which saves a recv that would only say EAGAIN;
  // but after a hang-up the end of the stream, which announces itself once, is still to be read.
  drained_ = would_block(error) || (!error && received < room && !hung_up_);
  // A client that closes with replies unread resets the connection: an ordinary end too.
  if (error == std::errc::connection_reset || (!error && received == 0)) {
    end_of_stream();
    return false;
  }
  if (error && !would_block(error)) {
    stop_for(error == std::errc::protocol_error ? "sent a truncated control message"
                                                : "socket error");
    return false;
  }
  if (!received_fds_.empty()) {
    // Clients never send descriptors; the bytes that came with them cannot be trusted.
    received_fds_.clear();
    append_error(out_, 0, errc::unexpected_handle, "clients may not send file descriptors");
    reply_then_stop_for("sent a file descriptor");
    return false;
  }
  in_filled_ += received;
  return true;
}

void session::flush_soon() {
  if (!poller_.flush_later(poller_key_)) flush();
}

void session::flush_replies() {
  if (stopped_ || !flush()) return;
  if (input_held_ && pending_output() < kBackpressureBytes) {
    input_held_ = false;
    poller_.serve_again(poller_key_);
  }
}

void session::writable() {
  if (stopped_ || !waiting_to_write_) return;
  waiting_to_write_ = false;
  // Left on when epoll refuses: edge-triggered, a stale EPOLLOUT only wakes the loop once.
  (void)poller_.watch_output(poller_key_, socket_.get(), false);
  if (!flush()) return;
  if (event_request_) pump_events();
  if (input_held_ && pending_output() < kBackpressureBytes) input_held_ = false;
}

session::input_state session::handle_frames(std::size_t& budget) {
  std::size_t consumed = 0;
  input_state state = input_state::empty;
  for (;;) {
    if (consumed == in_filled_) break;
    if (pending_output() >= kBackpressureBytes) {
      state = input_state::held;
      break;
    }
    if (budget == 0) {
      state = input_state::over_budget;
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
      reply_then_stop_for("sent a bad frame header");
      return input_state::stopped;
    }
    const std::size_t frame_start = out_.size();
    const reply_attachment attach = handler_.handle(state_, frame, out_);
    if (!attach.fds.empty()) queue_attachment(attach, frame_start, frame.head.request_id);
    if (std::exchange(state_.subscribing, false)) stream_events(frame.head.request_id);
    if (std::exchange(state_.opening_mailbox, false)) {
      open_mailbox(frame_start, frame.head.request_id);
    }
    consumed += frame.frame_size();
    --budget;
    if (state_.refused) {
      reply_then_stop_for("refused by the access policy or its quotas");
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
    // A wait that completed just before its request did is told apart by the clock. A
    // connection that closed while its process lives (end_of_stream) has no request to wait
    // for, and what the process holds stays until it exits, even if the wait completed before
    // the close cancelled it.
    if (!self || error || self->stopped_ || !self->socket_ || !self->partial_ ||
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
      proto::header head{};
      std::memcpy(&head, out_.data() + frame_start, sizeof head);
      const proto::message_info* request =
          proto::find_request(static_cast<std::uint16_t>(head.type & ~proto::kReplyBit));
      if (request != nullptr && request->reply_fds == proto::kFdAtMostOne) {
        // The descriptor only spares the client a request (open_sync's page): what the
        // request did stands, and the reply says so without it.
        head.fd_count = 0;
        head.handle = static_cast<std::uint16_t>(proto::handle_type::none);
        std::memcpy(out_.data() + frame_start, &head, sizeof head);
        return;
      }
      out_.resize(frame_start);
      append_error(out_, request_id, errc::internal, std::string("dup: ") + std::strerror(errno));
      return;
    }
  }
  for (auto& copy : copies) out_fds_.push_back({frame_start, std::move(copy)});
}

void session::open_mailbox(std::size_t frame_start, std::uint32_t request_id) {
  const std::size_t queued_before = out_fds_.size();
  try {
    mailbox_ = std::make_unique<request_mailbox>();
    mailbox_key_ = poller_.add(mailbox_->doorbell(), *this, client_poller::watched::doorbell);
  } catch (const std::exception& error) {
    mailbox_.reset();
    out_.resize(frame_start);
    append_error(out_, request_id, errc::internal,
                 std::string("cannot make a request mailbox: ") + error.what());
    return;
  }
  state_.mailbox_open = true;
  proto::header head{};
  std::memcpy(&head, out_.data() + frame_start, sizeof head);
  head.fd_count = 2;
  head.handle = static_cast<std::uint16_t>(proto::handle_type::mailbox);
  std::memcpy(out_.data() + frame_start, &head, sizeof head);
  queue_attachment({{mailbox_->memory(), mailbox_->doorbell()}, proto::handle_type::mailbox},
                   frame_start, request_id);
  // A descriptor that could not be copied turned the reply into an error: no mailbox then.
  if (out_fds_.size() != queued_before + 2) {
    close_mailbox();
    return;
  }
  mailbox_->forget_memory();
}

void session::close_mailbox() noexcept {
  if (!mailbox_) return;
  poller_.remove(mailbox_key_, mailbox_->doorbell());
  mailbox_.reset();
  mailbox_out_.clear();
  state_.mailbox_open = false;
}

void session::on_mailbox_ring() {
  // One call at a time, as the client makes them: a request put in before the last answer went
  // out is taken after it (answer_mailbox()).
  if (stopped_ || !mailbox_ || !mailbox_out_.empty()) return;
  switch (mailbox_->take(mailbox_in_)) {
    case request_mailbox::taken::none:
      return;
    case request_mailbox::taken::oversized:
      append_error(mailbox_out_, 0, errc::bad_message,
                   "a request in the request mailbox is larger than the largest frame (" +
                       std::to_string(kMaxFrameSize) + " bytes)");
      break;
    case request_mailbox::taken::request:
      if (poller_.serving_one_alone()) mailbox_->mark_answering();
      handle_mailbox_request();
      if (mailbox_in_.capacity() > kKeptOutputCapacity) {
        std::vector<std::byte>().swap(mailbox_in_);
      }
      break;
  }
  // No refusal ends the session here: only hello's does, and hello never comes this way.
  flush_soon();
}

void session::handle_mailbox_request() {
  proto::frame_view frame;
  std::error_code error;
  const auto status = proto::parse_frame(mailbox_in_, frame, error);
  if (status == proto::parse_status::invalid) {
    append_error(mailbox_out_, 0, static_cast<errc>(error.value()),
                 "bad frame header in the request mailbox: " + error.message());
    return;
  }
  if (status == proto::parse_status::incomplete || frame.frame_size() != mailbox_in_.size()) {
    append_error(mailbox_out_, 0, errc::bad_message,
                 "the request mailbox's size is not that of the one frame in it");
    return;
  }
  const proto::message_info* type = proto::find_request(frame.head.type);
  if (type != nullptr && !proto::mailbox_may_carry(*type)) {
    append_error(mailbox_out_, frame.head.request_id, errc::invalid_argument,
                 std::string(type->name) +
                     " may not come through the request mailbox (its reply carries descriptors, "
                     "or it belongs to the connection): send it on the socket");
    return;
  }
  // No descriptors come back: every request whose reply can carry some was turned away above.
  (void)handler_.handle(state_, frame, mailbox_out_);
}

void session::answer_mailbox() {
  if (!mailbox_ || mailbox_out_.empty()) return;
  // The codec keeps every reply within a frame; were one ever larger, the slot must not overflow.
  if (mailbox_out_.size() > kMaxFrameSize) {
    mailbox_out_.clear();
    append_error(mailbox_out_, 0, errc::internal, "the reply is larger than the mailbox holds");
  }
  mailbox_->answer(mailbox_out_);
  mailbox_out_.clear();
  if (mailbox_out_.capacity() > kKeptOutputCapacity) std::vector<std::byte>().swap(mailbox_out_);
  if (mailbox_->has_request()) poller_.serve_again(mailbox_key_);
}

void session::stream_events(std::uint32_t request_id) {
  // The connection carries a stream of replies from here on: no more calls through a mailbox.
  close_mailbox();
  event_request_ = request_id;
  books_.events.set_waker(state_.client, [weak = weak_from_this()] {
    const auto self = weak.lock();
    if (!self || std::exchange(self->pump_posted_, true)) return;
    // Events are published from inside other requests and departures: they go out after.
    asio::post(self->poller_.context(), [self] {
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
  if (::ioctl(socket_.get(), SIOCOUTQ, &unread) != 0) unread = 0;
  if (pending_output() + static_cast<std::size_t>(unread) <= config_.max_output_bytes) {
    return false;
  }
  stop_for("not reading its replies");
  return true;
}

std::size_t session::segment_end(std::size_t& fd_count) const noexcept {
  fd_count = 0;
  while (fd_count < out_fds_.size() && out_fds_[fd_count].offset == out_sent_) ++fd_count;
  return fd_count < out_fds_.size() ? out_fds_[fd_count].offset : out_.size();
}

bool session::record_sent(std::size_t fd_count, std::size_t sent, const std::error_code& error) {
  if (would_block(error)) {
    if (stopped_for_not_reading()) return false;
    // writable() when there is room; a socket that cannot be watched (ENOMEM) would wait for
    // it for good.
    if (!poller_.watch_output(poller_key_, socket_.get(), true)) {
      stop_for("its socket could not be watched for room to reply (epoll_ctl)");
      return false;
    }
    waiting_to_write_ = true;
    return false;
  }
  if (error == std::errc::broken_pipe || error == std::errc::connection_reset) {
    // The client closed its side with replies still to come: the same hang-up as the end of
    // the stream, so what its live process holds is kept as it would be there, unless the
    // session is being stopped anyway.
    if (!stopping_) end_of_stream();
    return false;
  }
  if (error) {
    stop_for("socket error while replying");
    return false;
  }
  out_fds_.erase(out_fds_.begin(), out_fds_.begin() + static_cast<std::ptrdiff_t>(fd_count));
  out_sent_ += sent;
  return true;
}

bool session::flush() {
  // Nothing a reply tells a client may be lost by a crash after it went out.
  books_.write_changes();
  const bool open = send_output();
  answer_mailbox();
  books_.start_deferred_work();
  return open;
}

bool session::send_output() {
  if (!socket_) {
    // The connection closed while its process keeps what it holds (end_of_stream): what was
    // built since (an event, say) has nowhere to go.
    out_.clear();
    out_sent_ = 0;
    out_fds_.clear();
    return false;
  }
  if (waiting_to_write_) return true;
  while (out_sent_ < out_.size()) {
    std::size_t fd_count = 0;
    const std::size_t end = segment_end(fd_count);
    std::vector<int> fds;
    for (std::size_t i = 0; i < fd_count; ++i) fds.push_back(out_fds_[i].fd.get());
    std::error_code error;
    const std::size_t sent = send_with_fds(
        socket_.get(), std::span(out_).subspan(out_sent_, end - out_sent_), fds, error);
    // Stopped, hung up (end_of_stream), or waiting for room: only the last goes on.
    if (!record_sent(fd_count, sent, error)) return !stopped_ && socket_;
  }
  out_.clear();
  out_sent_ = 0;
  if (out_.capacity() > kKeptOutputCapacity) std::vector<std::byte>().swap(out_);
  return true;
}

#ifdef GPUMEM_WITH_IO_URING
bool session::queue_receive(io_batch& batch, std::uint32_t events) {
  // As serve_input() would read first: not while held, and with no reply left to go out
  // before a read that may find the end of the stream.
  if (stopped_ || input_held_ || !socket_ || pending_output() > 0 || in_filled_ == in_.size() ||
      (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0) {
    return false;
  }
  batch.add_receive(poller_key_, socket_.get(), std::span(in_).subspan(in_filled_));
  return true;
}

void session::received(std::uint32_t events, std::size_t bytes, std::vector<unique_fd>& fds,
                       const std::error_code& error) {
  note_events(events);
  if (stopped_ || !socket_) return;
  for (unique_fd& fd : fds) received_fds_.push_back(std::move(fd));
  if (!apply_received(in_.size() - in_filled_, bytes, error)) return;
  serve_input();
}

bool session::queue_replies(io_batch& batch) {
  books_.write_changes();  // as flush(): before anything goes out
  if (stopped_ || !socket_ || waiting_to_write_ || pending_output() == 0) return false;
  const std::size_t end = segment_end(batched_fd_count_);
  // add_send copies the descriptors into the operation's own control message.
  std::vector<int> fds;
  for (std::size_t i = 0; i < batched_fd_count_; ++i) fds.push_back(out_fds_[i].fd.get());
  batch.add_send(poller_key_, socket_.get(), std::span(out_).subspan(out_sent_, end - out_sent_),
                 fds);
  return true;
}

void session::replies_sent(std::size_t sent, const std::error_code& error) {
  const bool all_sent = !stopped_ && record_sent(batched_fd_count_, sent, error);
  // The changes were written before the batch went (queue_replies()): the mailbox's answer
  // does not wait for room in the socket.
  answer_mailbox();
  books_.start_deferred_work();   // as flush() does, whether or not the socket took everything
  if (all_sent) flush_replies();  // what one sendmsg could not carry, and the input held for it
}
#endif

}  // namespace gpumem::daemon
