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
  erase_free(free_by_offset_.find(offset));
  if (block_size > *need) insert_free(offset + *need, block_size - *need);
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
  if (offset + *need > start + length) return false;
  erase_free(block);
  if (offset > start) insert_free(start, offset - start);
  if (start + length > offset + *need) insert_free(offset + *need, start + length - offset - *need);
  allocated_ += *need;
  return true;
}

void range_allocator::free(std::uint64_t offset, std::uint64_t size) {
  std::uint64_t start = offset;
  std::uint64_t length = *rounded(size);
  assert(allocated_ >= length);
  allocated_ -= length;
  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == start) {
      start = previous->first;
      length += previous->second;
      erase_free(previous);
    }
  }
  if (next != free_by_offset_.end() && start + length == next->first) {
    length += next->second;
    erase_free(next);
  }
  insert_free(start, length);
}

std::uint64_t range_allocator::largest_free_block() const noexcept {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

void range_allocator::insert_free(std::uint64_t offset, std::uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void range_allocator::erase_free(std::map<std::uint64_t, std::uint64_t>::iterator block) {
  free_by_size_.erase({block->second, block->first});
  free_by_offset_.erase(block);
}

}  // namespace gpumem
