// A CUDA pool's released blocks on the fake driver: each goes to the allocation stream only once
// the release stream's waits for its holders have landed, none is freed early or twice, and
// nothing ever makes the allocation stream wait for a holder.
#include "memory/released_blocks.hpp"

#include <gtest/gtest.h>

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
    blocks.emplace(fake_driver(), fake().current);
  }
  void TearDown() override {
    blocks.reset();
    EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();
    EXPECT_EQ(fake().live_count(testing::kind::event), 0u) << "every mark is destroyed";
    EXPECT_EQ(fake().calls["cuStreamWaitEvent"], 0) << "an allocation waited for a holder";
  }

  // Stand-ins for the pool's streams: the fake only tells them apart.
  const CUstream releases = reinterpret_cast<CUstream>(0x7001);
  const CUstream allocations = reinterpret_cast<CUstream>(0x7002);
  std::optional<released_blocks> blocks;
};

TEST_F(ReleasedBlocks, ABlockGoesToTheAllocationStreamOnlyOnceItsHoldersWorkIsDone) {
  hold_stream(releases, true);  // a holder's release event that has not fired
  EXPECT_EQ(blocks->add(0x1000, releases), CUDA_SUCCESS);
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  EXPECT_TRUE(fake().frees.empty()) << "freed while its holder's work may still use it";

  hold_stream(releases, false);
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  EXPECT_EQ(fake().frees, (freed{{0x1000, allocations}}));
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  EXPECT_EQ(fake().frees.size(), 1u) << "freed twice";
}

TEST_F(ReleasedBlocks, ABlockWhoseWaitsLandedIsFreedWhileALaterOneStillWaits) {
  EXPECT_EQ(blocks->add(0x1000, releases), CUDA_SUCCESS);
  hold_stream(releases, true);
  EXPECT_EQ(blocks->add(0x2000, releases), CUDA_SUCCESS);
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  EXPECT_EQ(fake().frees, (freed{{0x1000, allocations}}));

  hold_stream(releases, false);
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  EXPECT_EQ(fake().frees, (freed{{0x1000, allocations}, {0x2000, allocations}}));
}

TEST_F(ReleasedBlocks, PastEightMarksInFlightTheNewestIsRecordedAgainForTheBlocksAfterIt) {
  hold_stream(releases, true);
  for (CUdeviceptr block = 0x1000; block <= 0x8000; block += 0x1000) {
    EXPECT_EQ(blocks->add(block, releases), CUDA_SUCCESS);
  }
  hold_stream(releases, false);  // all eight landed, and nobody has looked yet
  hold_stream(releases, true);
  EXPECT_EQ(blocks->add(0x9000, releases), CUDA_SUCCESS);  // behind a new, held wait
  EXPECT_EQ(fake().live_count(testing::kind::event), released_blocks::kMarks) << "no more marks";
  EXPECT_EQ(fake().calls["cuEventRecord"], 9) << "each block marked, the last two by one mark";
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  freed expected;
  for (CUdeviceptr block = 0x1000; block <= 0x7000; block += 0x1000) {
    expected.emplace_back(block, allocations);
  }
  EXPECT_EQ(fake().frees, expected)
      << "the newest mark, recorded again, holds back the block it had and the new one";

  hold_stream(releases, false);
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  expected.emplace_back(0x8000, allocations);
  expected.emplace_back(0x9000, allocations);
  EXPECT_EQ(fake().frees, expected) << "every block once, in the order released";
  // The marks are free again: the next release gets one of its own.
  hold_stream(releases, true);
  EXPECT_EQ(blocks->add(0xa000, releases), CUDA_SUCCESS);
  hold_stream(releases, false);
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  EXPECT_EQ(fake().frees.back(), std::make_pair(CUdeviceptr{0xa000}, allocations));
}

TEST_F(ReleasedBlocks, ABlockThatCannotBeMarkedIsFreedBehindItsHoldersWaitsAtOnce) {
  hold_stream(releases, true);
  EXPECT_EQ(blocks->add(0x1000, releases), CUDA_SUCCESS);
  fake().failing = "cuEventRecord";
  EXPECT_EQ(blocks->add(0x2000, releases), CUDA_SUCCESS);
  EXPECT_EQ(fake().frees, (freed{{0x2000, releases}})) << "on the release stream, as before marks";

  fake().failing = "";
  hold_stream(releases, false);
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  EXPECT_EQ(fake().frees, (freed{{0x2000, releases}, {0x1000, allocations}}))
      << "the failed mark took nothing from the one before it";
}

TEST_F(ReleasedBlocks, AFreeTheDriverRefusesIsReportedAndTheBlocksAfterItStillGo) {
  EXPECT_EQ(blocks->add(0x1000, releases), CUDA_SUCCESS);
  fake().failing = "cuMemFreeAsync";
  fake().fail_with = CUDA_ERROR_INVALID_VALUE;
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_ERROR_INVALID_VALUE);
  fake().failing = "";
  EXPECT_EQ(blocks->add(0x2000, releases), CUDA_SUCCESS);
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  EXPECT_EQ(fake().frees, (freed{{0x2000, allocations}})) << "the refused one is not tried again";
}

TEST_F(ReleasedBlocks, BlocksStillWaitingWhenThePoolGoesAreFreedBehindTheirHoldersWaits) {
  hold_stream(releases, true);
  for (CUdeviceptr block = 0x1000; block <= 0x3000; block += 0x1000) {
    EXPECT_EQ(blocks->add(block, releases), CUDA_SUCCESS);
  }
  blocks->free_all(releases);
  EXPECT_EQ(fake().frees, (freed{{0x1000, releases}, {0x2000, releases}, {0x3000, releases}}));
  hold_stream(releases, false);
  EXPECT_EQ(blocks->free_landed(allocations), CUDA_SUCCESS);
  EXPECT_EQ(fake().frees.size(), 3u) << "freed twice";
}

}  // namespace
}  // namespace gpumem::daemon
