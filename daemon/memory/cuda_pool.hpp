#pragma once
/// @file
/// @brief An IPC-capable CUDA memory pool on one device, exported once as a POSIX fd.
///
/// Two streams per pool: allocations go on one; the waits for the holders' release events go on
/// the other, so that a slow holder never delays anyone's allocation. The pool is set to reuse
/// freed memory only once its free has completed (no internal dependencies), for the same
/// reason. A released block is freed onto the allocation stream once the waits before it have
/// landed (released_blocks), where the next allocations reuse it, unless it is kept as a spare.
/// Spare blocks (cuda_spares) were never handed out or their holders were done with them when they
/// became spares, so their frees wait for no holder: they go on the allocation stream.

#include <cuda.h>

#include <optional>
#include <unordered_map>
#include <vector>

#include "gpumem/shared/cuda/driver.hpp"
#include "gpumem/shared/cuda/handles.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "memory/cuda_spares.hpp"
#include "memory/holder_events.hpp"
#include "memory/pool.hpp"
#include "memory/released_blocks.hpp"

namespace gpumem::daemon {

class cuda_pool final : public pool {
 public:
  /// @param room the configured pool's, shared with its other instances; outlives this.
  /// @throws cuda_error or config_error (unknown device, bad peer) naming the pool.
  cuda_pool(std::uint32_t id, pool_config config, const cuda::driver_api& driver,
            family_room& room);
  ~cuda_pool() override;

  int shareable_fd() const noexcept override { return exported_.get(); }
  std::optional<ipc_handle> ready_event() const override;
  void finish_allocations() const override;
  grant_details grant_of(const placement& where) const override;
  void holder_released(std::uint64_t holder, const placement& where,
                       const std::optional<ipc_handle>& released_event) override;
  void forget_holder(std::uint64_t holder) noexcept override { holder_events_.forget(holder); }
  bool is_device_memory() const noexcept override { return true; }
  driver_usage driver_counters() const override;
  void start_deferred_work() noexcept override;
  /// The ready event, and the holders' release events kept open.
  std::uint32_t ipc_events_live() const noexcept override {
    return 1 + static_cast<std::uint32_t>(holder_events_.kept());
  }
  spare_use spares() const override;
  bool has_spare(std::uint64_t size) const override { return spares_.ready(size); }
  void drop_spares() noexcept override;

 private:
  std::optional<placement> do_allocate(std::uint64_t size) override;
  void do_free(const placement& where, std::uint64_t size) noexcept override;
  /// A live pool only holds what it allocated itself: a restarted daemon's pools from before
  /// are adopted_device_pool.
  bool do_adopt(const placement&, std::uint64_t, const grant_details&) override { return false; }
  std::uint64_t largest_possible() const noexcept override;
  /// Makes the pool's device context current for the calls that follow.
  void enter() const;
  /// Logs a driver call about a released block that failed: a free the driver refused leaves
  /// the block the pool's until it goes, a mark that failed leaves it freed on the release stream.
  void log_failed(failed_call failed) const noexcept;
  /// Notes @p size for start_deferred_work() to ask the spares for.
  void note_size_to_want(std::uint64_t size, bool from_spare) noexcept;
  /// Allocates on the allocation stream, exports, and records the ready event. Thread-safe.
  std::optional<exported_block> allocate_exported(std::uint64_t size) const;

  const cuda::driver_api& cu_;
  // In the order they are made, so that they go in reverse and the context last.
  cuda::primary_context context_;
  cuda::memory_pool pool_;
  cuda::stream allocation_stream_;
  cuda::stream release_stream_;
  /// Made with the streams; freed onto the allocation stream by the loop and the spares' worker.
  mutable std::optional<released_blocks> released_;
  cuda::event ready_;
  CUipcEventHandle ready_handle_{};
  /// Opened in the context, and so declared after it: they go first.
  holder_events holder_events_{cu_};
  unique_fd exported_;
  /// Export data of each live allocation, made once (cuMemPoolExportPointer costs ~20 us) and
  /// handed to the owner and to every opener.
  std::unordered_map<CUdeviceptr, CUmemPoolPtrExportData> exports_;
  /// Sizes allocated since the last start_deferred_work(), the spares to ask for then. Room for
  /// as many as the spares keep is made here, so that noting one never allocates (a size past
  /// them within one turn of the loop gets no spare).
  std::vector<std::uint64_t> sizes_to_want_ = [] {
    std::vector<std::uint64_t> room;
    room.reserve(cuda_spares::kMaxSizes);
    return room;
  }();
  /// Allocations served from a spare block, and made on the request path (the loop's).
  std::uint64_t served_ = 0;
  std::uint64_t made_on_request_ = 0;
  /// Blocks kept ahead of demand: made, or released and done with. Not in the books' bytes_in_use;
  /// the driver's counters show them. Declared last: its worker uses the members above.
  cuda_spares spares_;
};

}  // namespace gpumem::daemon
