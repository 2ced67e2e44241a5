#include "memory/host_pool.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "gpumem/shared/os/memfd.hpp"
#include "support/failing_allocations.hpp"

namespace gpumem::daemon {
namespace {

const std::uint64_t kPage = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));

/// A host pool of @p pages pages with the whole memfd mapped, as a client holding every range
/// would see it.
class HostPool : public ::testing::Test {
 protected:
  void make(std::uint64_t pages) {
    pool_config config;
    config.name = "test";
    config.size = pages * kPage;
    pool_.emplace(0, config);
    void* mapped =
        ::mmap(nullptr, config.size, PROT_READ | PROT_WRITE, MAP_SHARED, pool_->shareable_fd(), 0);
    ASSERT_NE(mapped, MAP_FAILED);
    bytes_ = static_cast<unsigned char*>(mapped);
    size_ = config.size;
  }
  /// A pool re-adopted from a memfd of @p pages pages that a previous daemon left holding
  /// @p value in every byte; memfd_ is the test's own descriptor of it (to read and to seal).
  void adopt(std::uint64_t pages, unsigned char value) {
    pool_config config;
    config.name = "test";
    config.size = pages * kPage;
    unique_fd made = os::make_memfd("test", config.size);
    const std::vector<unsigned char> filling(config.size, value);
    ASSERT_EQ(::pwrite(made.get(), filling.data(), filling.size(), 0),
              static_cast<ssize_t>(filling.size()));
    memfd_ = unique_fd(::dup(made.get()));
    pool_.emplace(0, config, std::move(made));
  }
  unsigned char byte_at(std::uint64_t offset) const {
    unsigned char value = 0xee;
    EXPECT_EQ(::pread(memfd_.get(), &value, 1, static_cast<off_t>(offset)), 1);
    return value;
  }
  /// Makes the memfd refuse punches (and writes), as the kernel would on an error of its own.
  void refuse_punches() const {
    ASSERT_EQ(::fcntl(memfd_.get(), F_ADD_SEALS, F_SEAL_WRITE), 0) << std::strerror(errno);
  }

  void TearDown() override {
    if (bytes_ != nullptr) ::munmap(bytes_, size_);
  }

  /// Whether the memfd holds a page anywhere in [offset, offset + length): punched ranges hold
  /// none, so their pages went back to the system.
  bool holds_pages(std::uint64_t offset, std::uint64_t length) const {
    const off_t found = ::lseek(pool_->shareable_fd(), static_cast<off_t>(offset), SEEK_DATA);
    if (found < 0) {
      EXPECT_EQ(errno, ENXIO);
      return false;
    }
    return static_cast<std::uint64_t>(found) < offset + length;
  }
  placement filled(std::uint64_t size, unsigned char value) {
    const placement where = pool_->allocate(size);
    std::memset(bytes_ + where.offset, value, where.reserved_bytes);
    return where;
  }

  std::optional<host_pool> pool_;
  unique_fd memfd_;
  unsigned char* bytes_ = nullptr;
  std::uint64_t size_ = 0;
};

TEST_F(HostPool, AFreedRangeIsPlacedAgainOnlyOnceItsPagesAreGone) {
  make(4);
  const placement first = filled(2 * kPage, 0x5a);
  pool_->free(first, 2 * kPage);
  EXPECT_EQ(pool_->usage().bytes_in_use, 0u) << "the books count it free at once";
  EXPECT_TRUE(holds_pages(first.offset, first.reserved_bytes)) << "punched only when settled";

  // Placed elsewhere while its pages are still there.
  const placement second = filled(2 * kPage, 0x11);
  EXPECT_NE(second.offset, first.offset);

  // The pool is full but for the unsettled range: an allocation settles it and gets zeroes.
  const placement third = pool_->allocate(2 * kPage);
  EXPECT_EQ(third.offset, first.offset);
  EXPECT_FALSE(holds_pages(third.offset, third.reserved_bytes));
  for (std::uint64_t i = 0; i < third.reserved_bytes; ++i) {
    ASSERT_EQ(bytes_[third.offset + i], 0) << "byte " << i;
  }
  EXPECT_EQ(bytes_[second.offset], 0x11) << "a live neighbour keeps its bytes";
}

TEST_F(HostPool, SettlingPunchesEveryFreedRangeAndNoLiveOne) {
  make(16);
  // Ranges of one, two and three pages, every other one freed, in no order of offset: the
  // freed ones that touch are punched together, the live ones between them are not.
  std::vector<placement> ranges;
  for (std::uint64_t pages : {1, 2, 3, 1, 2, 3, 1, 1, 2}) {
    ranges.push_back(filled(pages * kPage, static_cast<unsigned char>(ranges.size() + 1)));
  }
  const std::vector<std::size_t> freed = {7, 0, 1, 4, 5, 8};
  for (const std::size_t index : freed) {
    pool_->free(ranges[index], ranges[index].reserved_bytes);
  }
  pool_->settle_frees();
  for (std::size_t index = 0; index < ranges.size(); ++index) {
    const placement& where = ranges[index];
    const bool was_freed = std::find(freed.begin(), freed.end(), index) != freed.end();
    EXPECT_EQ(holds_pages(where.offset, where.reserved_bytes), !was_freed) << "range " << index;
    if (!was_freed) {
      EXPECT_EQ(bytes_[where.offset], index + 1);
      EXPECT_EQ(bytes_[where.offset + where.reserved_bytes - 1], index + 1);
    }
  }
  EXPECT_EQ(pool_->usage().allocations, ranges.size() - freed.size());

  // Everything freed is placeable again: the pool fills to the page.
  std::uint64_t free_pages = 16;
  for (std::size_t index = 0; index < ranges.size(); ++index) {
    if (std::find(freed.begin(), freed.end(), index) == freed.end()) {
      free_pages -= ranges[index].reserved_bytes / kPage;
    }
  }
  for (std::uint64_t i = 0; i < free_pages; ++i) pool_->allocate(kPage);
  EXPECT_THROW(pool_->allocate(kPage), std::exception);
}

TEST_F(HostPool, SettlingWithNothingFreedChangesNothing) {
  make(2);
  const placement live = filled(kPage, 0x77);
  pool_->settle_frees();
  EXPECT_TRUE(holds_pages(live.offset, live.reserved_bytes));
  EXPECT_EQ(bytes_[live.offset], 0x77);
}

TEST_F(HostPool, ARangeWhosePunchFailsIsNeverPlacedAgain) {
  adopt(2, 0);
  const placement first = pool_->allocate(2 * kPage);
  ASSERT_EQ(::pwrite(memfd_.get(), "secret", 6, static_cast<off_t>(first.offset)), 6);
  refuse_punches();
  pool_->free(first, 2 * kPage);
  pool_->settle_frees();
  EXPECT_EQ(byte_at(first.offset), 's') << "the punch was refused";
  EXPECT_EQ(pool_->usage().bytes_in_use, 0u);
  EXPECT_EQ(pool_->usage().bytes_reserved, 2 * kPage) << "withheld, so still held";
  EXPECT_THROW(pool_->allocate(kPage), std::exception)
      << "the only free range still holds its last holder's bytes";
}

// Settling runs where nothing may throw: a freed range that the allocator cannot take back
// for want of memory (it has no free neighbour) waits for the next turn, not a crash and not
// lost.
TEST_F(HostPool, ARangeThatCannotBeTakenBackForWantOfMemoryWaitsForTheNextSettle) {
  make(5);
  std::vector<placement> pages;
  for (int page = 0; page < 4; ++page) pages.push_back(filled(kPage, 7));  // the fifth is free
  pool_->free(pages[1], kPage);  // between two live ranges: the allocator needs memory for it
  {
    const testing::failing_allocations none;
    pool_->settle_frees();
  }
  EXPECT_EQ(pool_->usage().bytes_in_use, 3 * kPage);
  EXPECT_FALSE(holds_pages(pages[1].offset, kPage)) << "punched all the same";
  const placement fifth = pool_->allocate(kPage);
  EXPECT_EQ(fifth.offset, 4 * kPage) << "the waiting range is not placeable yet";
  const placement again = pool_->allocate(kPage);  // settles first: taken back now
  EXPECT_EQ(again.offset, pages[1].offset);
  EXPECT_EQ(bytes_[again.offset], 0) << "what its last holder wrote is gone";
  EXPECT_EQ(pool_->usage().bytes_reserved, 5 * kPage) << "nothing withheld";
}

TEST_F(HostPool, AnAdoptedMemfdsFreeSpaceIsPunchedAndItsLiveRangesKeepTheirBytes) {
  // Pages 1 and 3 live; 0, 2 and 4-5 are free in the records but hold the old bytes.
  adopt(6, 0x77);
  pool_->adopt({kPage, kPage}, kPage, {});
  pool_->adopt({3 * kPage, kPage}, kPage, {});
  pool_->zero_free_space();
  for (const std::uint64_t page : {0, 2, 4, 5}) {
    EXPECT_FALSE(holds_pages(page * kPage, kPage)) << "page " << page;
  }
  EXPECT_EQ(byte_at(kPage), 0x77);
  EXPECT_EQ(byte_at(4 * kPage - 1), 0x77);
  const placement next = pool_->allocate(2 * kPage);
  EXPECT_EQ(next.offset, 4 * kPage);
  EXPECT_EQ(byte_at(next.offset), 0);
}

TEST_F(HostPool, AnAdoptedMemfdsFreeSpaceThatCannotBePunchedIsNeverPlaced) {
  adopt(3, 0x77);
  pool_->adopt({kPage, kPage}, kPage, {});
  refuse_punches();
  pool_->zero_free_space();
  EXPECT_THROW(pool_->allocate(kPage), std::exception);
  EXPECT_EQ(pool_->usage().bytes_reserved, 3 * kPage) << "one live page, two withheld";
  pool_->free({kPage, kPage}, kPage);
  pool_->settle_frees();
  EXPECT_THROW(pool_->allocate(kPage), std::exception);
  EXPECT_EQ(pool_->usage().bytes_reserved, 3 * kPage);
  EXPECT_EQ(byte_at(0), 0x77);
}

}  // namespace
}  // namespace gpumem::daemon
