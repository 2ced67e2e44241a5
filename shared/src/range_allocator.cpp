#include "gpumem/shared/range_allocator.hpp"

#include <cassert>
#include <stdexcept>

namespace gpumem {

range_allocator::range_allocator(std::uint64_t capacity, std::uint64_t alignment)
    : capacity_(capacity & ~(alignment - 1)), alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw std::invalid_argument("range_allocator: alignment must be a power of two");
  }
  if (capacity_ > 0) insert_free(0, capacity_);
}

std::optional<std::uint64_t> range_allocator::rounded(std::uint64_t size) const noexcept {
  if (size == 0 || size > capacity_) return std::nullopt;
  return (size + alignment_ - 1) & ~(alignment_ - 1);
}

std::optional<std::uint64_t> range_allocator::allocate(std::uint64_t size) {
  const auto need = rounded(size);
  if (!need) return std::nullopt;
  const auto fit = free_by_size_.lower_bound({*need, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  const auto [block_size, offset] = *fit;
  const auto block = free_by_offset_.find(offset);
  if (block_size > *need) {
    move_free(block, offset + *need, block_size - *need);
  } else {
    erase_free(block);
  }
  allocated_ += *need;
  return offset;
}

bool range_allocator::take(std::uint64_t offset, std::uint64_t size) {
  const auto need = rounded(size);
  if (!need || (offset & (alignment_ - 1)) != 0) return false;
  auto block = free_by_offset_.upper_bound(offset);
  if (block == free_by_offset_.begin()) return false;
  --block;
  const auto [start, length] = *block;
  // Subtracted, not added: an offset from a previous daemon's records may lie near 2^64.
  if (*need > length || offset - start > length - *need) return false;
  const std::uint64_t end = offset + *need;
  // The one step that may allocate (and throw) comes first, before anything changed.
  if (offset > start && start + length > end) insert_free(end, start + length - end);
  if (offset > start) {
    move_free(block, start, offset - start);
  } else if (start + length > end) {
    move_free(block, end, start + length - end);
  } else {
    erase_free(block);
  }
  allocated_ += *need;
  return true;
}

void range_allocator::free(std::uint64_t offset, std::uint64_t size) {
  const std::uint64_t length = *rounded(size);
  assert(allocated_ >= length);
  const auto next = free_by_offset_.lower_bound(offset);
  auto previous = free_by_offset_.end();
  if (next != free_by_offset_.begin() &&
      std::prev(next)->first + std::prev(next)->second == offset) {
    previous = std::prev(next);
  }
  const bool joins_next = next != free_by_offset_.end() && offset + length == next->first;
  const std::uint64_t start = previous != free_by_offset_.end() ? previous->first : offset;
  const std::uint64_t end = joins_next ? next->first + next->second : offset + length;
  // A neighbour's entries take the new extent; only a block with no free neighbour needs new
  // ones, and their allocation comes first, before anything changed.
  if (previous != free_by_offset_.end()) {
    if (joins_next) erase_free(next);
    move_free(previous, start, end - start);
  } else if (joins_next) {
    move_free(next, start, end - start);
  } else {
    insert_free(start, end - start);
  }
  allocated_ -= length;
}

std::uint64_t range_allocator::largest_free_block() const noexcept {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

void range_allocator::insert_free(std::uint64_t offset, std::uint64_t size) {
  const auto [placed, added] = free_by_offset_.emplace(offset, size);
  assert(added);  // a new free block's offset is in no other free block
  (void)added;
  try {
    free_by_size_.emplace(size, offset);
  } catch (...) {
    free_by_offset_.erase(placed);
    throw;
  }
}

void range_allocator::move_free(by_offset::iterator block, std::uint64_t offset,
                                std::uint64_t size) noexcept {
  auto sized = free_by_size_.extract({block->second, block->first});
  assert(!sized.empty());  // both indexes always name the same free blocks
  sized.value() = {size, offset};
  free_by_size_.insert(std::move(sized));
  auto placed = free_by_offset_.extract(block);
  placed.key() = offset;
  placed.mapped() = size;
  free_by_offset_.insert(std::move(placed));
}

void range_allocator::erase_free(by_offset::iterator block) noexcept {
  free_by_size_.erase({block->second, block->first});
  free_by_offset_.erase(block);
}

}  // namespace gpumem
