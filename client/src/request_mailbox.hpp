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
  /// @brief Whether the daemon has said it is handling the request posted last and has not
  /// answered yet (proto::answering_mark()): the answer is due in about the handling's time.
  bool answering() const noexcept;
  /// @brief Waits until the daemon answers, at most @p longest (or less: a signal, or the
  /// daemon's mark that it is handling the request, which wakes a sleeper). While the request is
  /// marked, spins for the answer until kSpinWhileAnswering has passed since the mark was first
  /// seen, then sleeps.
  /// @return whether it slept on the futex (false when the answer came during the spin).
  bool sleep(std::chrono::nanoseconds longest) noexcept;
  /// How long a call spins once the daemon has marked it as being handled. The daemon handles
  /// most requests in 0.2-4 us, and a futex sleep and wake-up costs a call 5-10 us on a GPU
  /// host: spinning for about two of those bounds what a long request's spin wastes at about
  /// what sleeping at once would have cost. Unlike $GPUMEM_ANSWER_SPIN_US (transport.cpp), this
  /// spin needs no setting: the daemon marks a request only when it is the one request of its
  /// wake-up, so that its answer is due within the handling, never while it serves many clients,
  /// where spinning for answers burnt 3.5-4 times the client CPU (answer_spin_bench).
  static constexpr std::chrono::microseconds kSpinWhileAnswering{20};
  /// @brief The futex word the answer changes, and a value for waiting on it that is not the
  /// answer (the word's value now, unless that is the answer): for a caller that waits on
  /// several mailboxes at once (futex_waitv), which then returns at once if the word moved on.
  const std::uint32_t* answer_word() const noexcept { return &layout().reply_seq; }
  std::uint32_t unanswered_value() const noexcept;
  /// @brief Tells the daemon that the connection closes of its own accord (the next step), so
  /// that a process that exits before the daemon reads the close is not told as died.
  void say_closing() noexcept;

 private:
  proto::mailbox_layout& layout() const noexcept {
    return *static_cast<proto::mailbox_layout*>(mapping_.get());
  }
  void ring();

  unique_fd doorbell_;
  os::mapping mapping_;
  std::uint32_t posted_seq_ = 0;
  /// When sleep() first saw the request posted last marked as being handled.
  std::optional<std::chrono::steady_clock::time_point> answering_since_;
};

}  // namespace gpumem::detail
