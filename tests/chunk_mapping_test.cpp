// The client's chunk mapping over a host range, without a daemon: memfds made here play the
// daemon's chunks, listings are written by hand.
#include "chunk_mapping.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpumem/shared/os/memfd.hpp"
#include "host_range_mapper.hpp"
#include "support/pattern.hpp"

namespace gpumem::testing {
namespace {

constexpr std::size_t kChunk = 2u << 20;

/// A chunk as the daemon would make it: a memfd holding @p seed's pattern.
unique_fd chunk(std::uint32_t seed) {
  unique_fd fd = os::make_sealed_memfd("chunk_mapping_test", kChunk);
  void* bytes = ::mmap(nullptr, kChunk, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  EXPECT_NE(bytes, MAP_FAILED);
  fill_pattern(bytes, kChunk, seed);
  ::munmap(bytes, kChunk);
  return fd;
}

/// Chunks with @p ids, each holding the pattern seeded with @p seeds' entry at its index.
detail::chunk_listing listing(const std::vector<std::uint64_t>& ids,
                              const std::vector<std::uint32_t>& seeds) {
  detail::chunk_listing made;
  made.head.committed_chunks = ids.size();
  made.ids = ids;
  for (const std::uint32_t seed : seeds) made.fds.push_back(chunk(seed));
  return made;
}

detail::chunk_mapping host_mapping(std::size_t capacity) {
  return detail::chunk_mapping(
      std::make_unique<detail::host_range_mapper>(capacity * kChunk, kChunk), capacity);
}

std::byte* at(const detail::chunk_mapping& mapping, std::size_t index) {
  return static_cast<std::byte*>(mapping.base()) + index * kChunk;
}

/// Whether the process can read (or else write) a byte at @p address: the kernel answers
/// EFAULT instead of a signal when a system call meets memory it may not touch.
bool readable(const void* address) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  const bool read = ::write(pipe_fds[1], address, 1) == 1;
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  return read;
}
bool writable(void* address) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  EXPECT_EQ(::write(pipe_fds[1], address, 1), 1);
  const bool stored = ::read(pipe_fds[0], address, 1) == 1;
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  return stored;
}

TEST(ChunkMapping, MapsEachChunkAtItsIndexAndLeavesTheRestReserved) {
  auto mapping = host_mapping(4);
  mapping.apply(listing({7, 8, 9}, {1, 2, 3}), Access::read_write);
  EXPECT_EQ(mapping.count(), 3u);
  for (std::uint32_t index = 0; index < 3; ++index) {
    EXPECT_EQ(first_mismatch(at(mapping, index), kChunk, index + 1), kChunk);
  }
  EXPECT_TRUE(writable(at(mapping, 2)));
  EXPECT_FALSE(readable(at(mapping, 3))) << "a slot without a chunk is PROT_NONE";
}

TEST(ChunkMapping, KeepsTheChunksBeforeTheFirstIdThatDiffers) {
  auto mapping = host_mapping(3);
  mapping.apply(listing({7, 8, 9}, {1, 2, 3}), Access::read_only);
  // Same ids at 0 and 1 with other memory behind them: only index 2 may be mapped again.
  mapping.apply(listing({7, 8, 10}, {4, 5, 6}), Access::read_only);
  EXPECT_EQ(first_mismatch(at(mapping, 0), kChunk, 1), kChunk);
  EXPECT_EQ(first_mismatch(at(mapping, 1), kChunk, 2), kChunk);
  EXPECT_EQ(first_mismatch(at(mapping, 2), kChunk, 6), kChunk);
  mapping.apply(listing({11, 8, 10}, {7, 8, 9}), Access::read_only);
  for (std::uint32_t index = 0; index < 3; ++index) {
    EXPECT_EQ(first_mismatch(at(mapping, index), kChunk, index + 7), kChunk)
        << "a different chunk at 0 maps everything after it again";
  }
}

TEST(ChunkMapping, ShrinksToTheListingAndClearsToNothingWithTheRangeKept) {
  auto mapping = host_mapping(3);
  mapping.apply(listing({7, 8, 9}, {1, 2, 3}), Access::read_write);
  void* const start = mapping.base();
  mapping.apply(listing({7}, {1}), Access::read_write);
  EXPECT_EQ(mapping.count(), 1u);
  EXPECT_TRUE(readable(at(mapping, 0)));
  EXPECT_FALSE(readable(at(mapping, 1)));
  mapping.clear();
  EXPECT_EQ(mapping.count(), 0u);
  EXPECT_FALSE(readable(at(mapping, 0)));
  EXPECT_EQ(mapping.base(), start);
  mapping.apply(listing({12}, {4}), Access::read_write);
  EXPECT_EQ(first_mismatch(at(mapping, 0), kChunk, 4), kChunk);
}

TEST(ChunkMapping, AnotherAccessMapsEveryChunkAgain) {
  auto mapping = host_mapping(2);
  const auto chunks = listing({7, 8}, {1, 2});
  mapping.apply(chunks, Access::read_write);
  EXPECT_TRUE(writable(at(mapping, 1)));
  mapping.apply(chunks, Access::read_only);
  EXPECT_FALSE(writable(at(mapping, 0)));
  EXPECT_FALSE(writable(at(mapping, 1)));
  EXPECT_EQ(first_mismatch(at(mapping, 1), kChunk, 2), kChunk);
}

TEST(ChunkMapping, AListingLargerThanTheRangeIsRefusedAndMapsNothing) {
  auto mapping = host_mapping(2);
  try {
    mapping.apply(listing({7, 8, 9}, {1, 2, 3}), Access::read_only);
    ADD_FAILURE() << "three chunks mapped into a range of two";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::bad_message) << error.what();
  }
  EXPECT_EQ(mapping.count(), 0u);
}

}  // namespace
}  // namespace gpumem::testing
