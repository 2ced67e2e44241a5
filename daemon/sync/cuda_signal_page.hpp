#pragma once
/// @file
/// @brief The signal page on a CUDA device: one VMM chunk (stream memory operations are
/// refused on pool memory), mapped in the daemon too so that it can repair words after a
/// death or a reset. Its stream `repairs_` carries the daemon's writes and clears and never
/// waits, so they land in the order they were made and soon.
///
/// The turns of a dead stream-lock holder are not passed on by a stream wait: the daemon
/// looks at the `serving` words now and then (pass_arrived_turns()) and writes the next turn
/// once a dead holder's has come. Waits queued on one stream would pass on every lock's turns
/// in the order they were queued, and a turn that comes only after another lock's turn behind
/// it would hold both up for good: two turns of a dead process whose other clients nest the
/// locks, say. A wait on a stream of its own per turn would still share a hardware queue with
/// the others (see repairs_landed()).
///
/// The daemon does not wait for the words either: one copy on a stream of its own, `reads_`,
/// queued behind the writes made on repairs_ before it (an event), gathers every cell's
/// `serving` word into pinned host memory; the next look decides on them once the copy has
/// landed, then queues the next copy. The copy waits for a copy engine, which clients' copies
/// may keep busy: on a stream of its own it holds up no repair, unless the two streams share a
/// hardware queue (see repairs_landed()), and then no longer than the bound.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "gpumem/shared/cuda/driver.hpp"
#include "gpumem/shared/cuda/handles.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "rate_limited_log.hpp"
#include "sync/signal_page.hpp"

namespace gpumem::daemon {

class cuda_signal_page final : public signal_page {
 public:
  /// @throws request_error(no_such_device), cuda::cuda_error, std::bad_alloc
  cuda_signal_page(const cuda::driver_api& driver, std::int32_t device);
  /// @brief Re-adoption: the page a previous daemon made, by its kept fd, words intact.
  cuda_signal_page(const cuda::driver_api& driver, std::int32_t device, unique_fd exported);
  cuda_signal_page(const cuda_signal_page&) = delete;
  cuda_signal_page& operator=(const cuda_signal_page&) = delete;
  ~cuda_signal_page() override;

  int fd() const noexcept override { return exported_.get(); }
  std::uint64_t size() const noexcept override { return size_; }
  std::uint32_t read(std::uint32_t cell, std::size_t offset) override;
  void write(std::uint32_t cell, std::size_t offset, std::uint32_t value) override;
  void pass_turn(std::uint32_t cell, std::uint32_t turn, std::uint32_t next_turn) override;
  /// Drops the turns waiting on the cell: its next object or epoch starts from zero.
  void clear(std::uint32_t cell) override;
  bool pass_arrived_turns(const passed_turn_sink& passed) noexcept override;
  std::size_t waiting_turn_count() const noexcept override { return waiting_turns_.size(); }

 private:
  /// A dead stream-lock holder's turn given to pass_turn() that has not come, or whose pass
  /// has not been seen landed.
  struct waiting_turn {
    std::uint32_t cell = 0;
    std::uint32_t turn = 0;
    std::uint32_t next_turn = 0;
    /// The first read of the words (counted by reads_queued_) queued after the turn was given,
    /// or after its pass was written: the first that can tell of it.
    std::uint64_t told_by_read = 0;
    bool written = false;  ///< the next turn is written, and waits to be seen landed
  };
  /// Where a read of the words lands: one `serving` word per cell.
  struct pinned_words {
    void operator()(std::uint32_t* words) const noexcept;
  };

  static constexpr std::chrono::microseconds kRepairsBound{2000};

  CUdeviceptr address(std::uint32_t cell, std::size_t offset) const;
  /// How many tickets @p each is ahead of its lock's @p word, cyclically.
  static std::uint16_t ahead(const waiting_turn& each, std::uint32_t word) noexcept;
  /// Whether the lock's @p word has moved past @p each: the turn waits no more.
  static bool passed_by(const waiting_turn& each, std::uint32_t word) noexcept;
  /// Writes the next turn of @p each, which has come. @throws cuda::cuda_error
  void pass_on(waiting_turn& each);
  /// Queues the copy of every cell's `serving` word into served_ on reads_, behind the writes
  /// queued on repairs_ before it. @throws cuda::cuda_error
  void queue_read();
  /// Whether everything queued on @p stream has landed, asked until @p bound has passed (at
  /// least once). @throws cuda::cuda_error
  bool drained_within(const cuda::stream& stream, std::chrono::microseconds bound);
  /// Decides on the words of the read that has just landed: passes on the turns that have
  /// come, and lets go of those that wait no more.
  void decide(const passed_turn_sink& passed) noexcept;
  /// Takes the turns that @p done says wait no more off the list, telling @p passed of each.
  template <class Done>
  void finish_turns_if(Done done, const passed_turn_sink& passed) noexcept;
  void warn_failed(const waiting_turn& each, const std::exception& error) noexcept;
  /// Whether every write queued on repairs_ has landed, asked for at most kRepairsBound. They
  /// wait for no client and land in well under a millisecond, but a context's streams share
  /// the GPU's hardware work queues once there are more streams than queues (on an H200, a
  /// stream blocked in cuStreamWaitValue32 held up one other of 48, and 7 of 15 with
  /// CUDA_DEVICE_MAX_CONNECTIONS=2), so another of the daemon's streams that waits for a
  /// client (a pool's frees wait for the client's release event) may hold them up: the daemon
  /// waits no longer, and not again until they have landed (held_up_).
  bool repairs_landed();
  /// Maps handle_ into the daemon, makes the streams, and pins served_.
  void map_into_daemon(std::int32_t device);

  const cuda::driver_api& cu_;
  std::uint64_t size_ = 0;
  // In the order they are made, so that they go in reverse and the context last.
  cuda::primary_context context_;
  cuda::allocation_handle handle_;
  unique_fd exported_;
  cuda::address_range range_;
  cuda::mapped_range mapped_;
  cuda::stream repairs_;
  cuda::stream reads_;
  cuda::event repairs_so_far_;  ///< recorded on repairs_ before each read, which waits for it
  std::unique_ptr<std::uint32_t[], pinned_words> served_;
  cuda::host_registration served_pinned_;
  std::uint64_t reads_queued_ = 0;
  bool read_in_flight_ = false;  ///< the last read queued has not been seen landed
  std::vector<waiting_turn> waiting_turns_;
  bool held_up_ = false;  ///< the last wait for repairs_ ran out, and it has not drained since
  /// One line a second at most: clients can make clears (opening and closing objects) while the
  /// stream is held up.
  rate_limited_log late_zeroes_{std::chrono::seconds(1)};
  /// A turn is looked at every round of the loop's settling while the failure lasts.
  rate_limited_log failed_turns_{std::chrono::seconds(1)};
};

signal_page_maker cuda_signal_page_maker(const cuda::driver_api& driver);
signal_page_adopter cuda_signal_page_adopter(const cuda::driver_api& driver);

}  // namespace gpumem::daemon
