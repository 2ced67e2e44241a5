#include "net/io_batch.hpp"

#include <sched.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>

#include "gpumem/shared/fd_passing.hpp"

namespace gpumem::daemon {

std::unique_ptr<io_batch> io_batch::make() {
  std::unique_ptr<io_batch> made(new io_batch());
  if (const int status = ::io_uring_queue_init(kCapacity, &made->ring_, 0); status != 0) {
    spdlog::info("io_uring refused ({}): each connection's reads and replies are made one by one",
                 std::system_category().message(-status));
    return nullptr;
  }
  made->ring_made_ = true;
  if (const std::string unusable = made->unusable_because(); !unusable.empty()) {
    spdlog::info("io_uring not used: {}; each connection's reads and replies are made one by one",
                 unusable);
    return nullptr;
  }
  return made;
}

io_batch::~io_batch() {
  if (ring_made_) ::io_uring_queue_exit(&ring_);
}

std::string io_batch::unusable_because() {
  // io_uring_enter may be refused where io_uring_setup is not (a seccomp profile that lists
  // only some of the calls), and submit() stops the daemon on that: a no-op first, whose
  // failure is only an answer.
  io_uring_sqe* nop = ::io_uring_get_sqe(&ring_);
  ::io_uring_prep_nop(nop);
  if (const int status = ::io_uring_submit_and_wait(&ring_, 1); status < 0) {
    return "io_uring_enter refused (" + std::system_category().message(-status) + ")";
  }
  io_uring_cqe* nop_done = nullptr;
  if (::io_uring_peek_cqe(&ring_, &nop_done) != 0) return "a no-op did not complete";
  ::io_uring_cqe_seen(&ring_, nop_done);
  // One byte with a descriptor through the ring and back, over a socket pair of its own:
  // exactly what replies and reads do, so a kernel that refuses it is known before a client is.
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    return "socketpair for its check failed (" + std::system_category().message(errno) + ")";
  }
  const unique_fd sender(ends[0]);
  const unique_fd receiver(ends[1]);
  const std::byte sent_byte{0x5a};
  std::byte received_byte{};
  const int passed[] = {receiver.get()};
  bool carried = true;
  add_send(0, sender.get(), std::span(&sent_byte, 1), passed);
  run([&](std::uint64_t, std::size_t bytes, std::vector<unique_fd>&, const std::error_code& error) {
    carried = carried && !error && bytes == 1;
  });
  add_receive(0, receiver.get(), std::span(&received_byte, 1));
  run([&](std::uint64_t, std::size_t bytes, std::vector<unique_fd>& fds,
          const std::error_code& error) {
    carried = carried && !error && bytes == 1 && fds.size() == 1 && received_byte == sent_byte;
  });
  if (!carried) {
    return "it cannot pass descriptors on this kernel (before Linux 5.12 it refuses control "
           "messages)";
  }
  return {};
}

io_batch::entry& io_batch::next(std::uint64_t key, bool receive, std::span<const std::byte> bytes) {
  entry& made = entries_[queued_];
  made.key = key;
  made.receive = receive;
  made.io = {const_cast<std::byte*>(bytes.data()), bytes.size()};
  made.message = {};
  made.message.msg_iov = &made.io;
  made.message.msg_iovlen = 1;
  // Until its completion says otherwise (submit() sees every operation complete).
  made.bytes = 0;
  made.error = std::make_error_code(std::errc::resource_unavailable_try_again);
  return made;
}

void io_batch::add_send(std::uint64_t key, int socket, std::span<const std::byte> bytes,
                        std::span<const int> fds) {
  entry& made = next(key, false, bytes);
  if (!fds.empty()) {
    made.control.resize(std::max(made.control.size(), fd_control_size(fds.size())));
    attach_fds(made.message, made.control, fds);
  }
  // Never null: the ring has kCapacity entries and submit() empties it every batch.
  io_uring_sqe* sqe = ::io_uring_get_sqe(&ring_);
  ::io_uring_prep_sendmsg(sqe, socket, &made.message, MSG_NOSIGNAL | MSG_DONTWAIT);
  ::io_uring_sqe_set_data64(sqe, queued_++);
}

void io_batch::add_receive(std::uint64_t key, int socket, std::span<std::byte> room) {
  entry& made = next(key, true, room);
  made.control.resize(std::max(made.control.size(), fd_receive_control_size()));
  made.message.msg_control = made.control.data();
  made.message.msg_controllen = made.control.size();
  io_uring_sqe* sqe = ::io_uring_get_sqe(&ring_);
  ::io_uring_prep_recvmsg(sqe, socket, &made.message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  ::io_uring_sqe_set_data64(sqe, queued_++);
}

void io_batch::submit() {
  if (queued_ == 0) return;
  // Every queued operation is submitted and has completed before run() reads the entries and
  // the next batch reuses them: an operation left in the ring would run in the next batch
  // under another operation's entry, and send one client's replies (and descriptors) to
  // another. The kernel may take fewer than were queued when it cannot allocate (EAGAIN,
  // EBUSY): the rest is submitted again, a bounded number of times. Non-blocking operations
  // complete within their submission, so the waits never sleep on a client.
  constexpr int kAttempts = 1000;
  std::size_t completed = 0;
  for (int attempt = 1; completed < queued_; ++attempt) {
    const int status = ::io_uring_submit_and_wait(&ring_, 1);
    if (status < 0 && status != -EINTR && status != -EAGAIN && status != -EBUSY) {
      spdlog::critical("io_uring_submit_and_wait: {}; stopping rather than misdirect a reply",
                       std::system_category().message(-status));
      std::abort();
    }
    completed += reap();
    if (completed < queued_ && attempt == kAttempts) {
      spdlog::critical(
          "io_uring: {} of {} operations still not done after {} submissions; "
          "stopping rather than misdirect a reply",
          queued_ - completed, queued_, kAttempts);
      std::abort();
    }
    if (completed < queued_ && status < 0) ::sched_yield();
  }
}

std::size_t io_batch::reap() {
  std::size_t completed = 0;
  unsigned head = 0;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    entry& done = entries_[::io_uring_cqe_get_data64(cqe)];
    if (cqe->res < 0) {
      done.error = {-cqe->res, std::system_category()};
    } else {
      done.bytes = static_cast<std::size_t>(cqe->res);
      done.error.clear();
      if (done.receive) {
        take_fds(done.message, done.fds, done.error);
        if (done.error) done.bytes = 0;
      }
    }
    ++completed;
  }
  ::io_uring_cq_advance(&ring_, static_cast<unsigned>(completed));
  return completed;
}

}  // namespace gpumem::daemon
