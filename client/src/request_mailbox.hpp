#pragma once
/// @file
/// @brief The client's side of its connection's request mailbox (proto/mailbox.hpp): the
/// transport's way for every request whose reply carries no descriptor, once the daemon gave
/// it one.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "gpumem/proto/mailbox.hpp"
#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::detail {

class request_mailbox {
 public:
  /// @brief Maps the mailbox open_mailbox's reply brought.
  /// @throws Error(bad_message) when the memfd is smaller than the layout, Error(io_error) when
  /// it cannot be mapped.
  request_mailbox(unique_fd memory, unique_fd doorbell);

  /// @brief Puts @p request in the request slot and rings the daemon.
  /// @pre request.size() <= proto::kMaxFrameSize. @throws Error(io_error) when the ring fails.
  void post(std::span<const std::byte> request);
  /// @brief Copies the answer to the request posted last into @p into.
  /// @return its size, or nullopt while the daemon has not answered.
  /// @throws Error(bad_message) when the answer is larger than @p into.
  std::optional<std::size_t> take_answer(std::span<std::byte> into) const;
  /// @brief Sleeps until the daemon answers, at most @p longest (or less: a signal).
  void sleep(std::chrono::nanoseconds longest) const noexcept;
  /// @brief The futex word the answer changes, and its value until then: for a caller that
  /// waits on several mailboxes at once (futex_waitv).
  const std::uint32_t* answer_word() const noexcept { return &layout().reply_seq; }
  std::uint32_t unanswered_value() const noexcept { return posted_seq_ - 1; }

 private:
  proto::mailbox_layout& layout() const noexcept {
    return *static_cast<proto::mailbox_layout*>(mapping_.get());
  }
  void ring();

  unique_fd doorbell_;
  os::mapping mapping_;
  std::uint32_t posted_seq_ = 0;
};

}  // namespace gpumem::detail
