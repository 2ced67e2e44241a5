#pragma once
/// @file
/// @brief The daemon's side of one connection's request mailbox (proto/mailbox.hpp): makes the
/// memfd and the doorbell, takes each new request out of the shared slot into the daemon's own
/// memory, and puts the reply back. The client can write every byte of the mapping at any
/// time, so what is read from it is read once, bounded and copied before anything looks at it.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gpumem/proto/mailbox.hpp"
#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::daemon {

class request_mailbox {
 public:
  /// @throws std::system_error naming the step that failed (memfd, eventfd, mmap).
  request_mailbox();
  /// Gives the mailbox's pages back: a client that keeps the memfd keeps none of the daemon's
  /// memory with it.
  ~request_mailbox();
  request_mailbox(const request_mailbox&) = delete;
  request_mailbox& operator=(const request_mailbox&) = delete;

  /// The memfd, for the client to map, until forget_memory().
  int memory() const noexcept { return memory_.get(); }
  /// @brief Closes the daemon's descriptor of the memfd once the client has its copy: the
  /// mapping keeps the memory, and a connection then costs the daemon one descriptor less.
  void forget_memory() noexcept { memory_.reset(); }
  /// The eventfd the client writes to; the loop watches it (edge-triggered, never read).
  int doorbell() const noexcept { return doorbell_.get(); }

  enum class taken { none, request, oversized };
  /// @brief Copies the request the client put in since the last one taken into @p into.
  /// @return none when there is no new one; oversized when its size exceeds kMaxFrameSize (it
  /// counts as taken, and @p into is empty).
  taken take(std::vector<std::byte>& into);
  /// @brief Tells the client that the request taken last is being handled, and wakes it: its
  /// wake-up then overlaps the handling (proto/mailbox.hpp, answering_mark()).
  void mark_answering() noexcept;
  /// @brief Puts @p reply in the reply slot as the answer to the request taken last, and wakes
  /// the client. @pre reply.size() <= proto::kMaxFrameSize
  void answer(std::span<const std::byte> reply) noexcept;
  /// @brief Whether a request newer than the last one taken waits: a client that rang before
  /// its previous answer came.
  bool has_request() const noexcept;
  /// @brief Whether the client said it closes of its own accord (proto::kClosingCleanly).
  bool client_closed_cleanly() const noexcept;

 private:
  proto::mailbox_layout& layout() const noexcept {
    return *static_cast<proto::mailbox_layout*>(mapping_.get());
  }

  unique_fd memory_;
  unique_fd doorbell_;
  os::mapping mapping_;
  std::uint32_t taken_seq_ = 0;  ///< the daemon's own count: never read back from the slot
};

}  // namespace gpumem::daemon
