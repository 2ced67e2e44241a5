#pragma once
/// @file
/// @brief Blocks allocated and exported ahead of demand, on a thread of their own, or kept from
/// releases.
///
/// Exporting a pool pointer costs ~20 us, more than the rest of an allocation; a block of a
/// size clients just asked for is prepared by a worker thread, so the next request of that
/// size is answered from it and the daemon's loop never spends that time. At most a few
/// sizes are kept, two blocks each; the owner drains them when it needs the room.
///
/// Two, because the worker is not always quick to start: with one block per size it made a
/// 1 MiB block in 24 us (median) but started up to 500 us after it was asked (p99 290 us,
/// cuda_share_bench on an H200, `--log-level debug`), and 7-16% of allocations came before the
/// block was back and paid for the making on the request path (17-94 us); with two, 1 in 2,022.
///
/// The worker starts on what was wanted only when the owner says so (start_wanted()), once the
/// reply that asked for it went out: woken at once, its driver calls ran beside the loop while
/// it answered and made a 1 MiB allocation's round trip 10 us slower than the daemon's
/// handling of it explained (cuda_share_bench on an H100).
///
/// Spares are device memory within the configured pool's size: each block is counted in the
/// family_room that the pool's instances share, and made only if it fits there.
///
/// A block whose holders released it and are done with it (released_blocks) is offered here
/// before it goes back to the pool: kept as a spare of its size, with the export data it has, it
/// is handed out again with no driver call at all and the worker makes nothing. A program that
/// frees a buffer and asks for one of the same size, as most do at every step, then never waits
/// for the making: with the worker alone, 1-2% of the allocations that came right after a release
/// found no block ready and paid 100-200 us for the making (cuda_share_bench on an H200, MPS off
/// and on; the worker's export took 25 us at the median and 110 us at p99, sharing the driver
/// with the loop's release). Importing a block again in a process whose earlier import of it was
/// freed works as a first import (an H200, driver 580.159: 1,000 times, 0.4 us each). The daemon
/// learns that the holders are done when a mark on its release stream lands; with MPS off that
/// waits for the GPU to turn to the daemon's context (on an H200 the marks were still pending
/// 70-125 us after the release and seen landed 0.4-1.7 ms after it), so a block released just
/// before the next allocation serves a later one.

#include <cuda.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "memory/exported_block.hpp"
#include "memory/family_room.hpp"

namespace gpumem::daemon {

class cuda_spares {
 public:
  /// Makes one block of a size, on the worker thread; nullopt when the pool is full. What it
  /// throws is logged and taken as no block.
  using maker = std::function<std::optional<exported_block>(std::uint64_t size)>;
  /// Frees a block nobody wants any more, on the worker thread, with the spares' lock held: it
  /// must not call back into the spares.
  using discarder = std::function<void(const exported_block&)>;
  /// Prepared blocks by their size; no vector is empty.
  using blocks_by_size = std::unordered_map<std::uint64_t, std::vector<exported_block>>;

  static constexpr std::size_t kMaxSizes = 8;
  static constexpr std::size_t kBlocksPerSize = 2;
  static constexpr std::uint64_t kMaxBlockSize = 64 << 20;
  /// Device memory all spares of a pool may hold: what one block of each of 8 sizes of at most
  /// 64 MiB held before a size got two. A CUDA pool serves one access class (a uid, a gid and a
  /// mode), so each class of tenants may hold this much.
  static constexpr std::uint64_t kMaxBytes = kMaxSizes * kMaxBlockSize;

  /// @param room the configured pool's, which the spare blocks are counted in; outlives this.
  cuda_spares(maker make, discarder discard, family_room& room);
  cuda_spares(const cuda_spares&) = delete;
  cuda_spares& operator=(const cuda_spares&) = delete;
  ~cuda_spares() { stop(); }

  /// @brief Ends the worker (idempotent); blocks still held are the owner's to drain().
  void stop();

  /// @brief Whether a block of exactly @p size is ready (then the owner's next take() of it
  /// finds one: only the owner takes).
  bool ready(std::uint64_t size) const;
  /// @brief A prepared block of exactly @p size, if one is ready.
  std::optional<exported_block> take(std::uint64_t size);
  /// @brief Takes @p block, of @p size, that its holders released and are done with, as a spare:
  /// in place of a block of that size still wanted (when it was the last wish of its size and its
  /// block is being made, that block is thrown away once made), or beside those ready, on the
  /// terms want() makes blocks on. On the loop thread, as want() (family_room).
  /// @return false: not taken, the caller frees it.
  bool offer(std::uint64_t size, const exported_block& block) noexcept;
  /// @brief Asks for blocks of @p size, up to kBlocksPerSize ready or being made, as many as
  /// the family_room holds (beside all instances' allocations and spares) and kMaxBytes allows,
  /// if the size is worth keeping; they are made after the next start_wanted().
  void want(std::uint64_t size) noexcept;
  /// @brief Lets the worker make what was wanted since the last call.
  void start_wanted() noexcept;
  /// @brief Every prepared block, for the owner to free; what is being made is dropped too.
  /// Allocates nothing (the blocks are handed over whole), so it cannot throw: the owner's
  /// drop_spares, which is noexcept, calls it.
  blocks_by_size drain() noexcept;
  /// @brief Blocks that became spares since the start: made by the worker, or taken by offer().
  struct origins {
    std::uint64_t made = 0;
    std::uint64_t reused = 0;
  };
  origins counted() const;
  /// @brief Bytes held or being made.
  std::uint64_t bytes() const;
  /// @brief Bytes of the blocks made and ready to take: bytes() less what is wanted or being made.
  std::uint64_t ready_bytes() const;

 private:
  void work();
  /// make_ on the worker thread, with what it throws logged and taken as no block: an
  /// exception there would end the daemon.
  std::optional<exported_block> make(std::uint64_t size) noexcept;
  /// Sizes kept, ready or wanted (at most kMaxSizes); the caller holds mutex_.
  std::size_t sizes_kept() const noexcept;
  /// Stops counting @p size bytes, here and in the room; the caller holds mutex_.
  void uncount(std::uint64_t size) noexcept;
  /// Blocks of @p size ready or wanted; the caller holds mutex_.
  std::size_t kept_of(std::uint64_t size) const noexcept;
  /// Whether one more block of @p size, @p kept of it being ready or wanted, may be counted
  /// here; if so, counts it here and in the room. The caller holds mutex_.
  bool count_one_more(std::uint64_t size, std::size_t kept) noexcept;
  /// Puts @p block among the ready blocks of @p size; false, with nothing changed, if there is
  /// no memory for it. The caller holds mutex_ and still counts the block.
  bool store_ready(std::uint64_t size, const exported_block& block) noexcept;

  maker make_;
  discarder discard_;
  family_room& room_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  blocks_by_size ready_;
  /// A size once per block to make or being made: at most kBlocksPerSize of each of kMaxSizes
  /// sizes, room for which is made here, so that want() never allocates.
  std::vector<std::uint64_t> wanted_ = [] {
    std::vector<std::uint64_t> room;
    room.reserve(kMaxSizes * kBlocksPerSize);
    return room;
  }();
  bool unstarted_ = false;        ///< wanted_ grew since the last start_wanted()
  std::uint64_t bytes_ = 0;       ///< ready, wanted and in the making
  std::uint64_t generation_ = 0;  ///< bumped by drain(): blocks made before it are unwanted
  origins counted_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point asked_at_;  ///< the last start_wanted(), for the log
  std::thread worker_;
};

}  // namespace gpumem::daemon
