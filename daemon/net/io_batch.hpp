#pragma once
/// @file
/// @brief One wake-up's socket reads, or its replies, made by one system call: a recvmsg or a
/// sendmsg per connection queued on an io_uring and submitted together. Where a system call
/// costs much (in a virtual machine: about 1.6 us on the development machine, as much as the
/// work of a small request), this takes most of a request's cost off the loop. Every operation
/// is non-blocking (MSG_DONTWAIT): an empty or full socket answers EAGAIN, as recvmsg and
/// sendmsg do, and the session waits for the next event as before. Descriptors cross through
/// shared/fd_passing's helpers.
/// Built with liburing (GPUMEM_WITH_IO_URING); make() says when the kernel refuses io_uring
/// (a container's seccomp profile, io_uring_disabled), and the loop then makes the calls itself.

#include <liburing.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::daemon {

class io_batch {
 public:
  /// Operations queued before the batch must be run.
  static constexpr std::size_t kCapacity = 256;

  /// @return a batch, or nullptr when the kernel refuses io_uring or will not pass descriptors
  /// through it.
  static std::unique_ptr<io_batch> make();
  ~io_batch();
  io_batch(const io_batch&) = delete;
  io_batch& operator=(const io_batch&) = delete;

  bool full() const noexcept { return queued_ == kCapacity; }
  bool empty() const noexcept { return queued_ == 0; }
  /// @brief Queues one sendmsg of @p bytes with @p fds (SCM_RIGHTS) on @p socket. The bytes
  /// must stay as they are until run() returns. @pre !full()
  void add_send(std::uint64_t key, int socket, std::span<const std::byte> bytes,
                std::span<const int> fds);
  /// @brief Queues one recvmsg into @p room, which must stay until run() returns. @pre !full()
  void add_receive(std::uint64_t key, int socket, std::span<std::byte> room);
  /// @brief Runs everything queued in one io_uring_enter, then calls
  /// @p done(key, bytes, descriptors received, error) for each, in the order queued.
  template <class Done>
  void run(Done&& done) {
    submit();
    for (std::size_t i = 0; i < queued_; ++i) {
      entry& each = entries_[i];
      done(each.key, each.bytes, each.fds, each.error);
      each.fds.clear();
    }
    queued_ = 0;
  }

 private:
  struct entry {
    std::uint64_t key;
    bool receive;
    msghdr message;
    iovec io;
    std::vector<std::byte> control;  ///< grows only for descriptors, kept once grown
    std::size_t bytes;
    std::error_code error;
    std::vector<unique_fd> fds;  ///< received: only ever from a misbehaving client
  };
  io_batch() = default;
  /// Why the ring cannot serve the loop, or empty: it must run at all, and a sendmsg with a
  /// descriptor and a recvmsg with room for one must work through it.
  std::string unusable_because();
  entry& next(std::uint64_t key, bool receive, std::span<const std::byte> bytes);
  void submit();
  /// Records the completions the ring holds. @return how many.
  std::size_t reap();

  io_uring ring_{};
  bool ring_made_ = false;  ///< io_uring_queue_init succeeded: only then is there a ring to free
  std::vector<entry> entries_ = std::vector<entry>(kCapacity);
  std::size_t queued_ = 0;
};

}  // namespace gpumem::daemon
