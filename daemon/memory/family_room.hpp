#pragma once
/// @file
/// @brief What one configured pool has left, shared by its instances (one per tenant).
///
/// The configured size bounds the instances' allocations together, and the blocks CUDA pools
/// make ahead of demand (cuda_spares) are made only in room that neither allocations nor other
/// spares hold. Each instance is a CUDA pool of its own whose driver limit is the whole size;
/// when each measured its room alone, a tenant's spares came on top of the other tenants'
/// allocations (two tenants of a 16 MiB pool held 24 MiB, on an H200).
///
/// Spares never refuse an allocation. One that needs their room drops its own instance's
/// (memory_book::make_room); other tenants' stay, since their memory would stay in those
/// tenants' pools anyway (IPC pools do not give exported memory back to the device), so
/// allocations and spares together can exceed the size by spares made before.
///
/// Allocations are counted on the daemon's loop thread; spares are counted there too, and given
/// back on any thread (a spare worker whose block could not be made).

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace gpumem::daemon {

class family_room {
 public:
  explicit family_room(std::uint64_t size) noexcept : size_(size) {}
  family_room(const family_room&) = delete;
  family_room& operator=(const family_room&) = delete;

  std::uint64_t size() const noexcept { return size_; }
  /// @brief Bytes of the instances' live allocations.
  std::uint64_t bytes_in_use() const noexcept { return in_use_; }
  /// @brief Bytes the instances hold, or are making, in spare blocks.
  std::uint64_t spare_bytes() const noexcept { return spares_.load(std::memory_order_relaxed); }
  /// @brief Bytes left beside the allocations; none when a restarted daemon adopted more than a
  /// smaller size now allows.
  std::uint64_t unallocated() const noexcept { return size_ - std::min(size_, in_use_); }
  /// @brief Bytes left beside the allocations and the spares.
  std::uint64_t free() const noexcept { return size_ - std::min(size_, in_use_ + spare_bytes()); }

  void allocated(std::uint64_t bytes) noexcept { in_use_ += bytes; }
  void freed(std::uint64_t bytes) noexcept { in_use_ -= bytes; }

  /// @brief Counts a spare block of @p bytes if it fits in free(); the loop thread only, so that
  /// no other thread adds between the check and the count (others only give back).
  bool hold_spare(std::uint64_t bytes) noexcept {
    if (bytes > free()) return false;
    spares_.fetch_add(bytes, std::memory_order_relaxed);
    return true;
  }
  /// @brief Gives back what hold_spare() counted: a block taken for an allocation, dropped, or
  /// that could not be made.
  void release_spare(std::uint64_t bytes) noexcept {
    spares_.fetch_sub(bytes, std::memory_order_relaxed);
  }

 private:
  const std::uint64_t size_;
  std::uint64_t in_use_ = 0;
  std::atomic<std::uint64_t> spares_{0};
};

}  // namespace gpumem::daemon
