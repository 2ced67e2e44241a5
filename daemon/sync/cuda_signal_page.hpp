#pragma once
/// @file
/// @brief The signal page on a CUDA device: one VMM chunk (stream memory operations are
/// refused on pool memory), mapped in the daemon too so that it can repair words after a
/// death or a reset. Two streams of its own: `repairs_` for writes and clears, which never
/// wait, so they land in the order they were made and soon; `turns_` for the turns passed on
/// for a dead stream-lock holder, which wait for other clients' streams (so the turns of all
/// the page's locks still pass on in the order they were queued). On one stream a turn that
/// did not come held up every repair behind it, other objects' too.

#include <chrono>

#include "gpumem/shared/cuda/driver.hpp"
#include "gpumem/shared/cuda/handles.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "rate_limited_log.hpp"
#include "sync/signal_page.hpp"

namespace gpumem::daemon {

class cuda_signal_page final : public signal_page {
 public:
  /// @throws request_error(no_such_device), cuda::cuda_error
  cuda_signal_page(const cuda::driver_api& driver, std::int32_t device);
  /// @brief Re-adoption: the page a previous daemon made, by its kept fd, words intact.
  cuda_signal_page(const cuda::driver_api& driver, std::int32_t device, unique_fd exported);

  int fd() const noexcept override { return exported_.get(); }
  std::uint64_t size() const noexcept override { return size_; }
  std::uint32_t read(std::uint32_t cell, std::size_t offset) override;
  void write(std::uint32_t cell, std::size_t offset, std::uint32_t value) override;
  void pass_turn(std::uint32_t cell, std::size_t offset, std::uint32_t turn,
                 std::uint32_t next_turn) override;
  void clear(std::uint32_t cell) override;

 private:
  static constexpr std::chrono::microseconds kRepairsBound{2000};

  CUdeviceptr address(std::uint32_t cell, std::size_t offset) const;
  /// Whether every write queued on repairs_ has landed, asked for at most kRepairsBound. They
  /// wait for no client and land in well under a millisecond, but a context's streams share
  /// the GPU's hardware work queues once there are more streams than queues (on an H200, a
  /// stream blocked in cuStreamWaitValue32 held up one other of 48, and 7 of 15 with
  /// CUDA_DEVICE_MAX_CONNECTIONS=2), so a turn may hold them up: the daemon waits no longer,
  /// and not again until they have landed (held_up_).
  bool repairs_landed();
  /// Maps handle_ into the daemon and makes the streams.
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
  cuda::stream turns_;
  bool held_up_ = false;  ///< the last wait for repairs_ ran out, and it has not drained since
  /// One line a second at most: clients can make clears (opening and closing objects) while the
  /// stream is held up.
  rate_limited_log late_zeroes_{std::chrono::seconds(1)};
};

signal_page_maker cuda_signal_page_maker(const cuda::driver_api& driver);
signal_page_adopter cuda_signal_page_adopter(const cuda::driver_api& driver);

}  // namespace gpumem::daemon
