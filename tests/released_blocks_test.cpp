// A CUDA pool's released blocks on the fake driver: each is offered for reuse, or goes to the
// allocation stream, only once the release stream's waits for its holders have landed, and none
// is freed early or twice.
#include "memory/released_blocks.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "support/fake_driver.hpp"

namespace gpumem::daemon {
namespace {

using gpumem::testing::fake;
using gpumem::testing::fake_driver;
using gpumem::testing::fake_primary_context;
using gpumem::testing::hold_stream;
using gpumem::testing::reset_fake_driver;
using freed = std::vector<std::pair<CUdeviceptr, CUstream>>;

class ReleasedBlocks : public ::testing::Test {
 protected:
  void SetUp() override {
    reset_fake_driver();
    fake().current = fake_primary_context(0);
    blocks.emplace(fake_driver(), fake().current,
                   [this](std::uint64_t size, const exported_block& block) {
                     offers.push_back({block, size});
                     return reuse_takes(block.pointer);
                   });
  }
  void TearDown() override {
    blocks.reset();
    EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();
    EXPECT_EQ(fake().live_count(testing::kind::event), 0u) << "every mark is destroyed";
  }

  /// Adds @p block, expecting no driver call to fail.
  void add(CUdeviceptr block) {
    const failed_call failed = blocks->add(exported(block), kSize, releases);
    EXPECT_FALSE(failed) << "adding " << block << ": " << failed.call;
  }
  /// @p block with export data of its own: its pointer's second byte, first.
  static exported_block exported(CUdeviceptr block) {
    exported_block made{block, {}};
    made.data.reserved[0] = static_cast<unsigned char>(block >> 8);
    return made;
  }
  /// Offers, then frees, what landed, expecting no driver call to fail.
  void reuse_or_free_landed() {
    const failed_call failed = blocks->reuse_or_free_landed(allocations);
    EXPECT_FALSE(failed) << failed.call;
  }
  /// Frees what landed, offering nothing, expecting no driver call to fail.
  void free_landed() {
    const failed_call failed = blocks->free_landed(allocations);
    EXPECT_FALSE(failed) << failed.call;
  }
  /// The blocks @p from to @p to, 0x1000 apart, as freed onto @p stream in that order.
  static freed onto(CUstream stream, CUdeviceptr from, CUdeviceptr to) {
    freed all;
    for (CUdeviceptr block = from; block <= to; block += 0x1000) all.emplace_back(block, stream);
    return all;
  }

  // Stand-ins for the pool's streams: the fake only tells them apart.
  const CUstream releases = reinterpret_cast<CUstream>(0x7001);
  const CUstream allocations = reinterpret_cast<CUstream>(0x7002);
  static constexpr std::uint64_t kSize = 1 << 20;
  struct offer {
    exported_block block;
    std::uint64_t size;
  };
  std::vector<offer> offers;  ///< what the reuse was offered, in order
  /// Whether the reuse takes the block at a pointer; by default it takes none.
  std::function<bool(CUdeviceptr)> reuse_takes = [](CUdeviceptr) { return false; };
  std::optional<released_blocks> blocks;
};

TEST_F(ReleasedBlocks, ABlockGoesToTheAllocationStreamOnlyOnceItsHoldersWorkIsDone) {
  hold_stream(releases, true);  // a holder's release event that has not fired
  add(0x1000);
  free_landed();
  EXPECT_TRUE(fake().frees.empty()) << "freed while its holder's work may still use it";

  hold_stream(releases, false);
  free_landed();
  EXPECT_EQ(fake().frees, (freed{{0x1000, allocations}}));
  free_landed();
  EXPECT_EQ(fake().frees.size(), 1u) << "freed twice";
}

TEST_F(ReleasedBlocks, ABlockWhoseWaitsLandedIsFreedWhileALaterOneStillWaits) {
  add(0x1000);
  hold_stream(releases, true);
  add(0x2000);
  free_landed();
  EXPECT_EQ(fake().frees, (freed{{0x1000, allocations}}));

  hold_stream(releases, false);
  free_landed();
  EXPECT_EQ(fake().frees, (freed{{0x1000, allocations}, {0x2000, allocations}}));
}

TEST_F(ReleasedBlocks, PastEightMarksInFlightTheNewestIsRecordedAgainForTheBlocksAfterIt) {
  // Three marks come and go first, so that the ring of marks wraps around.
  add(0x100);
  add(0x200);
  add(0x300);
  free_landed();
  ASSERT_EQ(fake().frees,
            (freed{{0x100, allocations}, {0x200, allocations}, {0x300, allocations}}));
  fake().frees.clear();

  hold_stream(releases, true);
  for (CUdeviceptr block = 0x1000; block <= 0x8000; block += 0x1000) add(block);
  hold_stream(releases, false);  // all eight landed, and nobody has looked yet
  hold_stream(releases, true);
  add(0x9000);  // behind a new, held wait
  EXPECT_EQ(fake().live_count(testing::kind::event), released_blocks::kMarks) << "no more marks";
  EXPECT_EQ(fake().calls["cuEventRecord"], 12) << "each block marked, the last two by one mark";
  free_landed();
  EXPECT_EQ(fake().frees, onto(allocations, 0x1000, 0x7000))
      << "the newest mark, recorded again, holds back the block it had and the new one";

  hold_stream(releases, false);
  free_landed();
  EXPECT_EQ(fake().frees, onto(allocations, 0x1000, 0x9000))
      << "every block once, in the order released";
  // The marks are free again: the next release gets one of its own.
  hold_stream(releases, true);
  add(0xa000);
  free_landed();
  EXPECT_EQ(fake().frees.size(), 9u);
  hold_stream(releases, false);
  free_landed();
  EXPECT_EQ(fake().frees.back(), std::make_pair(CUdeviceptr{0xa000}, allocations));
}

TEST_F(ReleasedBlocks, ABlockThatCannotBeMarkedIsFreedBehindItsHoldersWaitsAndOnlyThere) {
  hold_stream(releases, true);
  add(0x1000);
  fake().failing = "cuEventRecord";
  const failed_call failed = blocks->add(exported(0x2000), kSize, releases);
  EXPECT_STREQ(failed.call, "cuEventRecord");
  EXPECT_EQ(fake().frees, (freed{{0x2000, releases}})) << "on the release stream, as before marks";

  // The next block takes the slot the failed one was put in, and lands with it.
  fake().failing = "";
  add(0x3000);
  hold_stream(releases, false);
  free_landed();
  EXPECT_EQ(fake().frees, (freed{{0x2000, releases}, {0x1000, allocations}, {0x3000, allocations}}))
      << "each block freed once, and the unmarked one only behind its waits";
}

TEST_F(ReleasedBlocks, ABlockThatCannotBeAddedToTheNewestMarkLeavesItsBlocksWaiting) {
  hold_stream(releases, true);
  for (CUdeviceptr block = 0x1000; block <= 0x8000; block += 0x1000) add(block);
  hold_stream(releases, false);  // the newest mark landed with 0x8000 ...
  hold_stream(releases, true);
  add(0x9000);  // ... and was recorded again, behind a held wait
  fake().failing = "cuEventRecord";
  EXPECT_STREQ(blocks->add(exported(0xa000), kSize, releases).call, "cuEventRecord");
  fake().failing = "";
  EXPECT_EQ(fake().frees, (freed{{0xa000, releases}})) << "behind its waits, at once";
  free_landed();
  EXPECT_EQ(fake().frees.size(), 8u) << "0xa000 and 0x1000-0x7000: 0x8000 and 0x9000 still wait";

  hold_stream(releases, false);
  free_landed();
  EXPECT_EQ(fake().frees.size(), 10u);
  EXPECT_EQ(fake().frees.back(), std::make_pair(CUdeviceptr{0x9000}, allocations));
}

TEST_F(ReleasedBlocks, AFailedQueryOrFreeIsReportedAndTheBlocksAfterItStillGo) {
  add(0x1000);
  fake().failing = "cuEventQuery";
  fake().fail_with = CUDA_ERROR_INVALID_CONTEXT;
  EXPECT_STREQ(blocks->free_landed(allocations).call, "cuEventQuery");
  EXPECT_TRUE(fake().frees.empty()) << "a mark that could not be asked counts as not landed";

  fake().failing = "cuMemFreeAsync";
  fake().fail_with = CUDA_ERROR_INVALID_VALUE;
  const failed_call failed = blocks->free_landed(allocations);
  EXPECT_STREQ(failed.call, "cuMemFreeAsync");
  EXPECT_EQ(failed.status, CUDA_ERROR_INVALID_VALUE);
  fake().failing = "";
  add(0x2000);
  free_landed();
  EXPECT_EQ(fake().frees, (freed{{0x2000, allocations}})) << "the refused one is not tried again";
}

TEST_F(ReleasedBlocks, BlocksStillWaitingWhenThePoolGoesAreFreedBehindTheirHoldersWaits) {
  hold_stream(releases, true);
  for (CUdeviceptr block = 0x1000; block <= 0x3000; block += 0x1000) add(block);
  blocks->free_all(releases);
  EXPECT_EQ(fake().frees, onto(releases, 0x1000, 0x3000));
  hold_stream(releases, false);
  free_landed();
  EXPECT_EQ(fake().frees.size(), 3u) << "freed twice";
}

TEST_F(ReleasedBlocks, ALandedBlockIsOfferedWithItsSizeAndExportDataAndFreedOnlyIfNotTaken) {
  reuse_takes = [](CUdeviceptr block) { return block == 0x2000; };
  add(0x1000);
  add(0x2000);
  reuse_or_free_landed();
  ASSERT_EQ(offers.size(), 2u);
  EXPECT_EQ(offers[0].block.pointer, 0x1000u);
  EXPECT_EQ(offers[1].block.pointer, 0x2000u);
  EXPECT_EQ(offers[1].size, kSize);
  EXPECT_EQ(offers[1].block.data.reserved[0], 0x20) << "the export data it was handed out with";
  EXPECT_EQ(fake().frees, (freed{{0x1000, allocations}})) << "the taken block is not freed";
  reuse_or_free_landed();
  EXPECT_EQ(offers.size(), 2u) << "offered once";
}

TEST_F(ReleasedBlocks, ABlockIsOfferedOnlyOnceItsHoldersWorkIsDone) {
  reuse_takes = [](CUdeviceptr) { return true; };
  hold_stream(releases, true);
  add(0x1000);
  reuse_or_free_landed();
  EXPECT_TRUE(offers.empty()) << "offered while its holder's work may still use it";
  hold_stream(releases, false);
  reuse_or_free_landed();
  ASSERT_EQ(offers.size(), 1u);
  EXPECT_TRUE(fake().frees.empty());
}

TEST_F(ReleasedBlocks, FreeLandedOffersNothingAndFreesEveryLandedBlock) {
  reuse_takes = [](CUdeviceptr) { return true; };
  add(0x1000);
  add(0x2000);
  free_landed();
  EXPECT_TRUE(offers.empty()) << "for the spares' worker, which may not count spares";
  EXPECT_EQ(fake().frees, (freed{{0x1000, allocations}, {0x2000, allocations}}));
}

TEST_F(ReleasedBlocks, BlocksFreedBecauseThePoolGoesAreNotOffered) {
  reuse_takes = [](CUdeviceptr) { return true; };
  hold_stream(releases, true);
  add(0x1000);
  blocks->free_all(releases);
  EXPECT_TRUE(offers.empty());
  EXPECT_EQ(fake().frees, (freed{{0x1000, releases}}));
  hold_stream(releases, false);
}

}  // namespace
}  // namespace gpumem::daemon
