#pragma once
/// @file
/// @brief The blocks of a CUDA pool that their holders released, kept as spares or freed onto
/// the allocation stream once the holders' work on them is done, so that the next allocations
/// reuse them.
///
/// A released block may still be in use by work its holders queued before releasing it, so it
/// waits on the pool's release stream, behind their release events (cuda_pool.hpp); allocations
/// go on another stream, so that no grant waits for a holder's GPU work. Freed on the release
/// stream, as it was, a block was rarely reused: the driver reuses memory freed on another
/// stream if the allocation's stream has waited on an event after the free, and is allowed to
/// once the free has completed, but did not, though the frees had long run. On an H200 (driver
/// 580.159, MPS off) a client that allocated and released 1 MiB in turn was handed a new block
/// almost every time, 0.6-1 GiB of the pool in 1,000 rounds (`cuda_share_bench`), memory the
/// pool keeps, and the client paid 85-150 us to import from each new 32 MiB of it. Waiting on
/// the release stream's events from the allocation stream would bring the reuse back but make
/// every allocation wait for the slowest holder's work.
///
/// So each release is marked by an event on the release stream, behind the holders' waits, and
/// the block is freed onto the allocation stream once its mark has landed, which the driver
/// reuses in stream order. The release stream runs in order, so a holder whose work is still
/// running holds back its own block and every block released after it in the pool, never an
/// allocation. Landed blocks are settled at the pool's next allocation or release, and after the
/// replies of a turn that allocated: offered whole, with their export data, to the owner's reuse
/// (the pool's spares, cuda_spares.hpp), and freed if it does not take them.

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "gpumem/shared/cuda/driver.hpp"
#include "gpumem/shared/cuda/handles.hpp"
#include "memory/exported_block.hpp"
#include "memory/failed_call.hpp"

namespace gpumem::daemon {

class released_blocks {
 public:
  /// Marks in flight at most; past that the newest is recorded again, later, and stands for
  /// the releases since (a release stream waiting that long on holders frees nothing anyway).
  static constexpr std::size_t kMarks = 8;

  /// Takes a block of a size whose holders are done with it, instead of its being freed; false
  /// leaves it to be freed. Must not throw; called on the thread that calls reuse_or_free_landed().
  using reuse = std::function<bool(std::uint64_t size, const exported_block& block)>;

  /// @brief Makes the marks, events of @p context. @throws cuda_error.
  /// @param reuse_landed offered each block whose holders are done, before it is freed; not
  /// empty.
  released_blocks(const cuda::driver_api& driver, CUcontext context, reuse reuse_landed);

  /// @brief Takes @p block, of @p size, whose holders' release events @p releases waits on, to
  /// be reused or freed once they are done; frees it on @p releases, behind the waits, if it
  /// cannot be marked. With the marks' context current.
  failed_call add(const exported_block& block, std::uint64_t size, CUstream releases) noexcept;
  /// @brief Offers to the reuse the blocks whose marks have landed, and frees onto
  /// @p allocations those it does not take. With the marks' context current. A free the driver
  /// refuses loses that block to the pool until it goes.
  failed_call reuse_or_free_landed(CUstream allocations) noexcept;
  /// @brief Frees onto @p allocations every block whose mark has landed, offering none: for a
  /// thread the reuse may not run on, and for an allocation that needs the memory back in the
  /// pool. As reuse_or_free_landed() otherwise.
  failed_call free_landed(CUstream allocations) noexcept;
  /// @brief Frees every block still held behind its holders' waits on @p releases (when the
  /// pool goes). With the marks' context current.
  void free_all(CUstream releases) noexcept;

 private:
  struct released {
    exported_block block;
    std::uint64_t size = 0;
  };
  struct marked_blocks {
    cuda::event mark;  ///< recorded on the release stream after the waits for these blocks
    std::vector<released> blocks;
  };

  /// Offers (when @p offer) or frees onto @p allocations the blocks whose marks have landed.
  failed_call settle_landed(CUstream allocations, bool offer) noexcept;
  /// Frees the blocks of the oldest mark in flight onto @p stream, those the reuse does not
  /// take when @p offer, and retires the mark.
  failed_call free_oldest(CUstream stream, bool offer) noexcept;

  const cuda::driver_api& cu_;
  const reuse reuse_;
  /// add() runs on the daemon's loop, free_landed() there and on the spares' worker.
  std::mutex mutex_;
  std::array<marked_blocks, kMarks> marks_;
  std::size_t oldest_ = 0;  ///< of the marks in flight, in the order they were recorded
  std::size_t in_flight_ = 0;
};

}  // namespace gpumem::daemon
