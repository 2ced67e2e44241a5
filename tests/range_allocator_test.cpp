#include "gpumem/shared/range_allocator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <new>
#include <optional>
#include <random>
#include <vector>

#include "support/failing_allocations.hpp"

namespace gpumem {
namespace {

using testing::failing_allocations;
using blocks = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

blocks free_blocks(const range_allocator& ranges) {
  blocks found;
  ranges.for_each_free_block(
      [&](std::uint64_t offset, std::uint64_t size) { found.emplace_back(offset, size); });
  return found;
}

/// Free blocks never touch (every free coalesced) and make the capacity with the allocated
/// bytes; the largest is the one the size index names.
void expect_consistent(const range_allocator& ranges) {
  const blocks found = free_blocks(ranges);
  std::uint64_t free = 0;
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < found.size(); ++i) {
    free += found[i].second;
    largest = std::max(largest, found[i].second);
    if (i > 0) {
      EXPECT_GT(found[i].first, found[i - 1].first + found[i - 1].second);
    }
  }
  EXPECT_EQ(free + ranges.bytes_allocated(), ranges.capacity());
  EXPECT_EQ(largest, ranges.largest_free_block());
}

TEST(RangeAllocator, RoundsToTheAlignmentAndFillsTheRange) {
  range_allocator ranges(16 * 4096, 4096);
  EXPECT_EQ(ranges.rounded(1), 4096u);
  EXPECT_EQ(ranges.rounded(4097), 8192u);
  std::vector<std::uint64_t> offsets;
  for (int i = 0; i < 16; ++i) {
    const auto offset = ranges.allocate(100);
    ASSERT_TRUE(offset);
    EXPECT_EQ(*offset % 4096, 0u);
    offsets.push_back(*offset);
  }
  EXPECT_FALSE(ranges.allocate(1));
  EXPECT_EQ(ranges.bytes_allocated(), 16u * 4096);
  for (auto offset : offsets) ranges.free(offset, 100);
  EXPECT_EQ(ranges.bytes_allocated(), 0u);
  EXPECT_EQ(ranges.largest_free_block(), 16u * 4096);
}

TEST(RangeAllocator, RefusesZeroAndTooLargeWithoutSideEffects) {
  range_allocator ranges(1 << 20, 4096);
  EXPECT_FALSE(ranges.allocate(0));
  EXPECT_FALSE(ranges.allocate((1 << 20) + 1));
  EXPECT_FALSE(ranges.allocate(~std::uint64_t{0}));
  EXPECT_EQ(ranges.bytes_allocated(), 0u);
  EXPECT_TRUE(ranges.allocate(1 << 20));
}

TEST(RangeAllocator, CoalescesNeighboursSoAFragmentedRangeHealsCompletely) {
  range_allocator ranges(64 * 4096, 4096);
  std::vector<std::uint64_t> offsets;
  for (int i = 0; i < 64; ++i) offsets.push_back(*ranges.allocate(4096));
  for (int i = 0; i < 64; i += 2) ranges.free(offsets[i], 4096);
  EXPECT_EQ(ranges.largest_free_block(), 4096u);
  EXPECT_FALSE(ranges.allocate(8192));
  for (int i = 1; i < 64; i += 2) ranges.free(offsets[i], 4096);
  EXPECT_EQ(ranges.largest_free_block(), 64u * 4096);
}

TEST(RangeAllocator, RandomWorkloadNeverOverlaps) {
  range_allocator ranges(1 << 24, 256);
  std::mt19937 random(7);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || random() % 3 != 0) {
      const std::uint64_t size = 1 + random() % 70000;
      if (const auto offset = ranges.allocate(size)) live.emplace_back(*offset, size);
    } else {
      const std::size_t victim = random() % live.size();
      ranges.free(live[victim].first, live[victim].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  std::sort(live.begin(), live.end());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < live.size(); ++i) {
    total += *ranges.rounded(live[i].second);
    if (i > 0) {
      ASSERT_GE(live[i].first, live[i - 1].first + live[i - 1].second);
    }
    ASSERT_LE(live[i].first + live[i].second, ranges.capacity());
  }
  EXPECT_EQ(total, ranges.bytes_allocated());
  expect_consistent(ranges);
}

// A restarted daemon puts back the blocks its predecessor had handed out, then allocates
// around them.
TEST(RangeAllocator, TakeMarksExactlyTheGivenBlockAndRefusesOverlaps) {
  range_allocator ranges(16 * 4096, 4096);
  EXPECT_TRUE(ranges.take(4 * 4096, 4096 + 1));  // rounds to two pages: 4 and 5
  EXPECT_EQ(ranges.bytes_allocated(), 2u * 4096);
  EXPECT_FALSE(ranges.take(5 * 4096, 4096));       // overlaps the block taken
  EXPECT_FALSE(ranges.take(4096 + 1, 4096));       // not aligned
  EXPECT_FALSE(ranges.take(15 * 4096, 2 * 4096));  // past the end
  EXPECT_EQ(ranges.bytes_allocated(), 2u * 4096);
  EXPECT_EQ(ranges.largest_free_block(), 10u * 4096);  // pages 6 to 15
  ranges.free(4 * 4096, 4096 + 1);
  EXPECT_EQ(ranges.largest_free_block(), 16u * 4096);
}

// The daemon settles frees where nothing may throw: a free next to a free block, and every
// allocation, reuse that block's entries instead of allocating. Results are checked after each
// guard: a failed check allocates its message.
TEST(RangeAllocator, AllocatingAndFreeingNextToAFreeBlockAllocateNoMemory) {
  range_allocator ranges(16 * 4096, 4096);
  const std::uint64_t a = *ranges.allocate(4096);
  const std::uint64_t b = *ranges.allocate(4096);
  const std::uint64_t c = *ranges.allocate(4096);
  std::optional<std::uint64_t> split;
  {
    const failing_allocations none;
    split = ranges.allocate(2 * 4096);  // splits the free tail
    ranges.free(3 * 4096, 2 * 4096);    // joins the free tail again
    ranges.free(c, 4096);               // joins it from below
  }
  EXPECT_EQ(split, 3u * 4096);
  EXPECT_EQ(free_blocks(ranges), (blocks{{2 * 4096, 14 * 4096}}));
  ranges.free(a, 4096);                            // no free neighbour: new entries, allocated here
  const std::uint64_t d = *ranges.allocate(4096);  // page 0 again
  ranges.free(d, 4096);
  {
    const failing_allocations none;
    ranges.free(b, 4096);  // joins both neighbours
  }
  EXPECT_EQ(free_blocks(ranges), (blocks{{0, 16 * 4096}}));
  const std::uint64_t e = *ranges.allocate(4096);
  const std::uint64_t f = *ranges.allocate(4096);
  ranges.free(e, 4096);  // page 0 free, page 1 taken, the rest free
  {
    const failing_allocations none;
    ranges.free(f, 4096);                // joins the block below and the one above
    split = ranges.allocate(16 * 4096);  // takes the whole range
  }
  EXPECT_EQ(split, 0u);
  EXPECT_EQ(ranges.bytes_allocated(), 16u * 4096);
  expect_consistent(ranges);
}

TEST(RangeAllocator, AFreeNextOnlyToAFreeBlockBelowAllocatesNoMemory) {
  range_allocator ranges(4 * 4096, 4096);
  for (int page = 0; page < 4; ++page) ASSERT_TRUE(ranges.allocate(4096));
  ranges.free(0, 4096);  // no free neighbour: allocated here
  {
    const failing_allocations none;
    ranges.free(4096, 4096);  // only the block below is free
  }
  EXPECT_EQ(free_blocks(ranges), (blocks{{0, 2 * 4096}}));
  bool taken = false;
  {
    const failing_allocations none;
    taken = ranges.take(0, 4096);  // splits the block in two: reuses its entries
  }
  EXPECT_TRUE(taken);
  EXPECT_EQ(free_blocks(ranges), (blocks{{4096, 4096}}));
  expect_consistent(ranges);
}

TEST(RangeAllocator, AFreeOrTakeThatCannotAllocateThrowsAndChangesNothing) {
  range_allocator ranges(4 * 4096, 4096);
  for (int page = 0; page < 4; ++page) ASSERT_TRUE(ranges.allocate(4096));
  bool threw = false;
  {
    const failing_allocations none;
    try {
      ranges.free(4096, 4096);  // no free neighbour
    } catch (const std::bad_alloc&) {
      threw = true;
    }
  }
  EXPECT_TRUE(threw);
  EXPECT_EQ(ranges.bytes_allocated(), 4u * 4096);
  EXPECT_TRUE(free_blocks(ranges).empty());
  ranges.free(4096, 4096);
  ranges.free(2 * 4096, 4096);
  ranges.free(3 * 4096, 4096);
  EXPECT_EQ(free_blocks(ranges), (blocks{{4096, 3 * 4096}}));
  threw = false;
  {
    const failing_allocations none;
    try {
      (void)ranges.take(2 * 4096, 4096);  // splits it in three
    } catch (const std::bad_alloc&) {
      threw = true;
    }
  }
  EXPECT_TRUE(threw);
  EXPECT_EQ(free_blocks(ranges), (blocks{{4096, 3 * 4096}}));
  EXPECT_EQ(ranges.bytes_allocated(), 4096u);
  EXPECT_TRUE(ranges.take(2 * 4096, 4096));
  EXPECT_EQ(free_blocks(ranges), (blocks{{4096, 4096}, {3 * 4096, 4096}}));
  expect_consistent(ranges);
}

}  // namespace
}  // namespace gpumem
