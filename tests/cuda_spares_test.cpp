#include "memory/cuda_spares.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace gpumem::daemon {
namespace {

using namespace std::chrono_literals;

// Blocks whose pointer is their size, made by a worker the test can hold up.
struct fake_pool {
  std::atomic<int> started{0};  ///< makings that reached the gate
  std::atomic<int> made{0};
  std::atomic<int> discarded{0};
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  bool fail = false;

  cuda_spares spares{[this](std::uint64_t size) -> std::optional<exported_block> {
                       ++started;
                       opened.wait();
                       ++made;
                       if (fail) return std::nullopt;
                       exported_block block;
                       block.pointer = size;
                       return block;
                     },
                     [this](const exported_block&) { ++discarded; }};
};

/// True once @p done holds, false after 5 s: for the tests that wait for the worker.
template <class Condition>
bool within_5s(Condition done) {
  for (auto deadline = std::chrono::steady_clock::now() + 5s; !done();
       std::this_thread::sleep_for(1ms)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
  return true;
}

std::optional<exported_block> take_within(cuda_spares& spares, std::uint64_t size) {
  std::optional<exported_block> block;
  within_5s([&] { return (block = spares.take(size)).has_value(); });
  return block;
}

TEST(CudaSpares, AWantedSizeIsMadeTwiceAndEachBlockTakenOnce) {
  fake_pool pool;
  pool.gate.set_value();
  pool.spares.want(4096, 1 << 20);
  pool.spares.want(4096, 1 << 20);  // already asked for, both blocks
  EXPECT_EQ(pool.spares.bytes(), 2 * 4096u);
  pool.spares.start_wanted();
  for (std::size_t i = 0; i < cuda_spares::kBlocksPerSize; ++i) {
    const auto block = take_within(pool.spares, 4096);
    ASSERT_TRUE(block) << "block " << i;
    EXPECT_EQ(block->pointer, 4096u);
  }
  EXPECT_FALSE(pool.spares.take(4096));
  EXPECT_EQ(pool.made.load(), 2);
  EXPECT_EQ(pool.spares.bytes(), 0u);
}

TEST(CudaSpares, ATakenBlockIsMadeAgainSoThatTwoAreReadyOnceMore) {
  fake_pool pool;
  pool.gate.set_value();
  pool.spares.want(4096, 1 << 20);
  pool.spares.start_wanted();
  ASSERT_TRUE(within_5s([&] { return pool.made == 2; }));
  ASSERT_TRUE(pool.spares.take(4096));
  EXPECT_EQ(pool.spares.bytes(), 4096u) << "the other block stays ready";
  pool.spares.want(4096, 1 << 20);  // what an allocation asks after taking one
  EXPECT_EQ(pool.spares.bytes(), 2 * 4096u) << "one more wanted, not two";
  pool.spares.start_wanted();
  ASSERT_TRUE(within_5s([&] { return pool.made == 3; }));
  EXPECT_TRUE(take_within(pool.spares, 4096));
  EXPECT_TRUE(take_within(pool.spares, 4096));
  EXPECT_FALSE(pool.spares.take(4096));
  EXPECT_EQ(pool.made.load(), 3);
}

TEST(CudaSpares, OnlyTheBlocksThatFitTheRoomAreWanted) {
  fake_pool pool;
  pool.spares.want(4096, 4096);  // room for one block of the two
  EXPECT_EQ(pool.spares.bytes(), 4096u);
  pool.gate.set_value();
}

TEST(CudaSpares, NothingIsMadeUntilTheOwnerStartsTheWorker) {
  fake_pool pool;
  pool.gate.set_value();
  pool.spares.want(4096, 1 << 20);
  std::this_thread::sleep_for(50ms);  // the reply that asked for it is still on its way
  EXPECT_EQ(pool.made.load(), 0);
  EXPECT_EQ(pool.spares.bytes(), 2 * 4096u) << "counted from the moment they are wanted";
  pool.spares.start_wanted();
  ASSERT_TRUE(within_5s([&] { return pool.made == 2; }));
  EXPECT_TRUE(take_within(pool.spares, 4096));
  EXPECT_TRUE(take_within(pool.spares, 4096));
}

TEST(CudaSpares, SizesThatDoNotFitOrAreTooLargeOrTooManyAreNotPrepared) {
  fake_pool pool;
  pool.spares.want(8192, 4096);  // no room
  pool.spares.want(cuda_spares::kMaxBlockSize + 1, ~std::uint64_t{0});
  EXPECT_EQ(pool.spares.bytes(), 0u);
  for (std::uint64_t i = 1; i <= cuda_spares::kMaxSizes + 3; ++i)
    pool.spares.want(i * 256, 1 << 30);
  std::uint64_t expected = 0;
  for (std::uint64_t i = 1; i <= cuda_spares::kMaxSizes; ++i) {
    expected += cuda_spares::kBlocksPerSize * i * 256;
  }
  EXPECT_EQ(pool.spares.bytes(), expected) << "counted while wanted, before they are made";
  pool.gate.set_value();
}

TEST(CudaSpares, AllSparesTogetherHoldAtMostTheirByteLimit) {
  fake_pool pool;
  for (std::uint64_t i = 0; i < cuda_spares::kMaxSizes; ++i) {
    pool.spares.want(cuda_spares::kMaxBlockSize - i * 4096, ~std::uint64_t{0});
  }
  EXPECT_LE(pool.spares.bytes(), cuda_spares::kMaxBytes);
  EXPECT_GT(pool.spares.bytes(), cuda_spares::kMaxBytes - cuda_spares::kMaxBlockSize)
      << "as many blocks as fit";
  pool.gate.set_value();
}

TEST(CudaSpares, DrainGivesBackEveryReadyBlock) {
  fake_pool pool;
  pool.spares.want(512, 1 << 20);
  pool.spares.start_wanted();
  pool.gate.set_value();
  ASSERT_TRUE(take_within(pool.spares, 512));
  pool.spares.want(512, 1 << 20);
  pool.spares.start_wanted();
  ASSERT_TRUE(within_5s([&] { return pool.made == 3; }));
  std::this_thread::sleep_for(50ms);  // it is stored under the lock right after it is made
  const auto drained = pool.spares.drain();
  ASSERT_EQ(drained.size(), 2u);
  EXPECT_EQ(drained[0].first, 512u);
  EXPECT_EQ(drained[1].first, 512u);
  EXPECT_EQ(pool.spares.bytes(), 0u);
  EXPECT_EQ(pool.discarded.load(), 0) << "ready blocks go back to the owner";
}

TEST(CudaSpares, ABlockFinishedAfterADrainIsDiscardedNotLeaked) {
  fake_pool pool;
  pool.spares.want(1024, 1 << 20);
  pool.spares.start_wanted();
  ASSERT_TRUE(within_5s([&] { return pool.started == 1; }));  // the worker waits at the gate
  EXPECT_TRUE(pool.spares.drain().empty());
  pool.gate.set_value();
  ASSERT_TRUE(within_5s([&] { return pool.discarded >= 1; }));
  EXPECT_FALSE(pool.spares.take(1024));
  EXPECT_EQ(pool.spares.bytes(), 0u);
}

TEST(CudaSpares, AFailedBlockGivesItsBudgetBack) {
  fake_pool pool;
  pool.fail = true;
  pool.spares.want(2048, 1 << 20);
  pool.spares.start_wanted();
  pool.gate.set_value();
  ASSERT_TRUE(within_5s([&] { return pool.spares.bytes() == 0; }));
  EXPECT_FALSE(pool.spares.take(2048));
}

}  // namespace
}  // namespace gpumem::daemon
