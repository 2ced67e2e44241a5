#pragma once
/// @file
/// @brief Best-fit allocator of offsets inside a fixed range, with coalescing of free blocks.
/// Both lookups are O(log n) in the number of free blocks; it owns no memory itself.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace gpumem {

class range_allocator {
 public:
  /// @param capacity size of the range; @param alignment a power of two every offset and
  ///        size is rounded to.
  range_allocator(std::uint64_t capacity, std::uint64_t alignment);

  /// @brief Rounded size a request for @p size takes, or nullopt when it overflows.
  std::optional<std::uint64_t> rounded(std::uint64_t size) const noexcept;

  /// @return the offset of a block of rounded(@p size) bytes, or nullopt when none is free.
  std::optional<std::uint64_t> allocate(std::uint64_t size);

  /// @brief Marks the block of rounded(@p size) bytes at @p offset taken, as allocate() would
  /// have: for putting back what a previous owner of the range had allocated.
  /// @return false, changing nothing, when the block is not wholly free or not aligned.
  bool take(std::uint64_t offset, std::uint64_t size);

  /// @brief Returns a block; @p size as given to allocate().
  /// @throws std::bad_alloc, changing nothing, only when the block has no free neighbour (the
  /// others reuse a neighbour's entries). allocate() never allocates memory; take() only when
  /// it splits a free block in three. Each either completes or changes nothing.
  void free(std::uint64_t offset, std::uint64_t size);

  std::uint64_t capacity() const noexcept { return capacity_; }
  std::uint64_t bytes_allocated() const noexcept { return allocated_; }
  std::uint64_t largest_free_block() const noexcept;
  /// @brief Calls @p visit(offset, size) for each free block, in order of offset.
  template <class Visit>
  void for_each_free_block(Visit&& visit) const {
    for (const auto& [offset, size] : free_by_offset_) visit(offset, size);
  }

 private:
  using by_offset = std::map<std::uint64_t, std::uint64_t>;  // offset -> size

  /// Adds a free block's two entries: allocates, and on a throw adds neither.
  void insert_free(std::uint64_t offset, std::uint64_t size);
  /// Gives a free block's entries a new offset and size, reusing their nodes: allocates nothing.
  void move_free(by_offset::iterator block, std::uint64_t offset, std::uint64_t size) noexcept;
  void erase_free(by_offset::iterator block) noexcept;

  std::uint64_t capacity_;
  std::uint64_t alignment_;
  std::uint64_t allocated_ = 0;
  by_offset free_by_offset_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> free_by_size_;  // (size, offset)
};

}  // namespace gpumem
