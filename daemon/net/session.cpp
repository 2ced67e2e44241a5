#include "net/session.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "gpumem/shared/fd_passing.hpp"
#include "net/peer_process.hpp"

namespace gpumem::daemon {

namespace asio = boost::asio;
using proto::errc;

namespace {
constexpr std::size_t kMaxFrameSize = sizeof(proto::header) + proto::kMaxPayloadSize;

bool would_block(const std::error_code& error) {
  return error == std::errc::resource_unavailable_try_again ||
         error == std::errc::operation_would_block;
}
}  // namespace

session::session(socket_type socket, books& state, request_handler& handler,
                 std::uint64_t max_output_bytes, on_end ended)
    : socket_(std::move(socket)),
      process_watch_(socket_.get_executor()),
      books_(state),
      handler_(handler),
      max_output_bytes_(max_output_bytes),
      ended_(std::move(ended)),
      in_(kMaxFrameSize) {}

void session::start() {
  socket_.non_blocking(true);
  const credentials who = peer_credentials(socket_.native_handle());
  state_.client = books_.add_client(who);
  unique_fd pidfd = peer_pidfd(socket_.native_handle(), who);
  spdlog::info("client {} connected: pid {} uid {} gid {}{}", state_.client, who.pid, who.uid,
               who.gid, pidfd ? "" : " (process not visible: watching the socket only)");
  if (pidfd) watch_process_exit(std::move(pidfd));
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
                              pollfd exited{self->process_watch_.native_handle(), POLLIN, 0};
                              if (::poll(&exited, 1, 0) == 1) {
                                self->stop("process exited");
                              } else {
                                self->wait_for_process_exit();
                              }
                            });
}

void session::end_of_stream() {
  if (process_watch_.is_open() && books_.end_connection(state_.client)) {
    // The process lives on, and its GPU work may still use what it holds, or it may still hold
    // a lock: the rest of the ledger is kept until the process exits.
    spdlog::info(
        "client {} closed the connection holding device memory or locks: its host memory is "
        "let go, the rest kept until its process exits",
        state_.client);
    boost::system::error_code ignored;
    socket_.close(ignored);
    return;
  }
  stop("closed the connection");
}

void session::stop(const char* reason) {
  if (stopped_) return;
  stopped_ = true;
  spdlog::info("client {} gone: {}", state_.client, reason);
  boost::system::error_code ignored;
  socket_.close(ignored);
  process_watch_.close(ignored);
  books_.remove_client(state_.client);
  out_fds_.clear();
  ended_(*this);
}

asio::awaitable<void> session::read_loop() {
  auto self = shared_from_this();
  std::vector<unique_fd> fds;
  bool drained = false;
  while (!stopped_) {
    if (drained) {
      boost::system::error_code wait_error;
      co_await socket_.async_wait(socket_type::wait_read,
                                  asio::redirect_error(asio::use_awaitable, wait_error));
      if (wait_error) break;
    }
    const std::size_t space = in_.size() - in_filled_;
    std::error_code error;
    const std::size_t received =
        recv_with_fds(socket_.native_handle(), std::span(in_).subspan(in_filled_), fds, error);
    // The reactor reports readiness on edges: wait only once the socket is known to be empty.
    // A read shorter than the room offered took everything queued (as Asio's own speculative
    // reads assume), which saves a recv that would only say EAGAIN.
    drained = would_block(error) || (!error && received < space);
    if (would_block(error)) continue;
    if (error) {
      stop(error == std::errc::protocol_error ? "sent a truncated control message"
                                              : "socket error");
      break;
    }
    if (received == 0) {
      end_of_stream();
      break;
    }
    if (!fds.empty()) {
      // Clients never send descriptors; the bytes that came with them cannot be trusted.
      fds.clear();
      append_error(out_, 0, errc::unexpected_handle, "clients may not send file descriptors");
      flush();
      stop("sent a file descriptor");
      break;
    }
    in_filled_ += received;
    if (!handle_frames() || !flush()) break;
  }
}

bool session::handle_frames() {
  std::size_t consumed = 0;
  for (;;) {
    proto::frame_view frame;
    std::error_code error;
    const auto status =
        proto::parse_frame(std::span(in_).first(in_filled_).subspan(consumed), frame, error);
    if (status == proto::parse_status::incomplete) break;
    if (status == proto::parse_status::invalid) {
      // The stream cannot be resynchronised after a bad header: answer, then hang up.
      append_error(out_, 0, static_cast<errc>(error.value()),
                   "bad frame header: " + error.message());
      flush();
      stop("sent a bad frame header");
      return false;
    }
    const std::size_t frame_start = out_.size();
    const reply_attachment attach = handler_.handle(state_, frame, out_);
    if (!attach.fds.empty()) queue_attachment(attach, frame_start, frame.head.request_id);
    consumed += frame.frame_size();
    if (state_.refused) {
      flush();
      stop("refused by the access policy or its quotas");
      return false;
    }
  }
  if (consumed > 0) {
    std::memmove(in_.data(), in_.data() + consumed, in_filled_ - consumed);
    in_filled_ -= consumed;
  }
  return true;
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

bool session::flush() {
  if (out_.size() - out_sent_ > max_output_bytes_) {
    stop("not reading its replies");
    return false;
  }
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
      waiting_to_write_ = true;
      socket_.async_wait(socket_type::wait_write,
                         [self = shared_from_this()](const boost::system::error_code& wait_error) {
                           self->waiting_to_write_ = false;
                           if (!wait_error && !self->stopped_) self->flush();
                         });
      return true;
    }
    if (error) {
      stop("socket error while replying");
      return false;
    }
    out_fds_.erase(out_fds_.begin(), next);
    out_sent_ += sent;
  }
  out_.clear();
  out_sent_ = 0;
  return true;
}

}  // namespace gpumem::daemon
