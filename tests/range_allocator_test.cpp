#include "gpumem/shared/range_allocator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace gpumem {
namespace {

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

}  // namespace
}  // namespace gpumem
