// The daemon's signal page on a CUDA device, on the fake driver: how long the daemon waits for
// the writes on its repairs stream to land (another stream that waits for a client can hold it
// up through a shared hardware queue, so the wait is bounded, and only the first request after
// the hold-up pays the bound), and how it passes on the turns of dead stream-lock holders.
#include "sync/cuda_signal_page.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "gpumem/shared/sync/layout.hpp"
#include "support/fake_driver.hpp"

namespace gpumem::daemon {
namespace {

using namespace std::chrono_literals;
using gpumem::testing::fake;
using gpumem::testing::fake_driver;
using gpumem::testing::reset_fake_driver;
using clock_type = std::chrono::steady_clock;

/// The repairs stream queries as not drained from now on, or drained again.
void hold_up_repairs(bool held) {
  fake().failing = held ? "cuStreamQuery" : "";
  fake().fail_with = CUDA_ERROR_NOT_READY;
}

TEST(CudaSignalPage, OnlyTheFirstClearOrReadAfterItsRepairsAreHeldUpWaitsForThem) {
  reset_fake_driver();
  {
    cuda_signal_page page(fake_driver(), 0);
    const auto time_to_clear = [&](std::uint32_t cell) {
      const auto start = clock_type::now();
      page.clear(cell);
      return clock_type::now() - start;
    };
    hold_up_repairs(true);
    EXPECT_GE(time_to_clear(1), 1ms) << "the first clear gave its zeroes no time to land";

    const int queried = fake().calls["cuStreamQuery"];
    page.clear(2);
    EXPECT_EQ(page.read(2, 0), 0u);
    EXPECT_EQ(fake().calls["cuStreamQuery"] - queried, 2)
        << "while still held up, a clear and a read each looked once and went on";

    hold_up_repairs(false);
    page.clear(3);  // landed: the page waits again for the next hold-up
    hold_up_repairs(true);
    EXPECT_GE(time_to_clear(4), 1ms) << "a new hold-up was not waited for";
    EXPECT_EQ(fake().calls["cuStreamBatchMemOp"], 4) << "one batch of zeroes per clear";
  }
  EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();
  EXPECT_EQ(fake().retained(), 0);
}

/// The device address of @p offset in @p cell of the page, the fake's only range.
CUdeviceptr word_address(std::uint32_t cell, std::size_t offset) {
  const auto& ranges = fake().live[gpumem::testing::kind::range];
  EXPECT_EQ(ranges.size(), 1u);
  return *ranges.begin() + cell * sync::kSignalCellSize + offset;
}

/// What a live client's stream would write: the word as the GPU holds it.
void gpu_writes(std::uint32_t cell, std::uint32_t value) {
  fake().words[word_address(cell, 0)] = value;
}

std::uint32_t word_of(std::uint32_t cell) {
  return fake().words[word_address(cell, 0)];
}

TEST(CudaSignalPage, TurnsOfDeadClientsPassOnAsTheyComeAndWaitForNoOtherLocksTurn) {
  reset_fake_driver();
  {
    cuda_signal_page page(fake_driver(), 0);
    // A dead client's turns in two locks, given in the other order than they come: the second
    // lock's turn comes only once a live client that nests the locks got the first's.
    gpu_writes(1, 7);
    page.pass_turn(1, 0, 8, 9);
    gpu_writes(2, 3);
    page.pass_turn(2, 0, 4, 5);
    EXPECT_TRUE(page.has_waiting_turns());
    EXPECT_EQ(word_of(1), 7u);
    EXPECT_EQ(word_of(2), 3u) << "a turn that has not come was passed on";

    gpu_writes(2, 4);  // the first lock's holder released
    EXPECT_TRUE(page.pass_arrived_turns()) << "the second lock's turn has not come yet";
    EXPECT_EQ(word_of(2), 5u) << "the first lock's turn waited behind the second's";
    EXPECT_EQ(word_of(1), 7u);

    gpu_writes(1, 8);  // the live client got the first lock and released the second
    EXPECT_FALSE(page.pass_arrived_turns());
    EXPECT_EQ(word_of(1), 9u);
    EXPECT_FALSE(page.has_waiting_turns());
  }
  EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();
}

TEST(CudaSignalPage, ATurnThatHasComePassesAtOnceAndTheDeadClientsNextTurnAfterIt) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  gpu_writes(3, 5);
  page.pass_turn(3, 0, 5, 6);
  page.pass_turn(3, 0, 6, 7);
  EXPECT_EQ(word_of(3), 7u);
  EXPECT_FALSE(page.has_waiting_turns());
}

TEST(CudaSignalPage, AClearedCellsTurnsNoLongerWait) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  page.pass_turn(4, 0, 2, 3);
  ASSERT_TRUE(page.has_waiting_turns());
  page.clear(4);
  EXPECT_FALSE(page.has_waiting_turns());
  // The cell's next lock reaches that value of its own: the dead client's turn is not passed.
  gpu_writes(4, 2);
  EXPECT_FALSE(page.pass_arrived_turns());
  EXPECT_EQ(word_of(4), 2u);
}

TEST(CudaSignalPage, EachLookAtWaitingTurnsReadsABoundedNumberOfWordsAndGoesOnWhereItStopped) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  constexpr std::uint32_t kTurns = 40;
  for (std::uint32_t cell = 0; cell < kTurns; ++cell) page.pass_turn(cell, 0, 1, 2);
  for (std::uint32_t cell = 0; cell < kTurns; ++cell) gpu_writes(cell, 1);
  const int reads_before = fake().calls["cuMemcpyDtoH"];
  EXPECT_TRUE(page.pass_arrived_turns());
  const int reads = fake().calls["cuMemcpyDtoH"] - reads_before;
  EXPECT_GT(reads, 0);
  EXPECT_LT(reads, static_cast<int>(kTurns)) << "one look read every waiting turn's word";
  EXPECT_FALSE(page.pass_arrived_turns()) << "the second look did not reach the rest";
  for (std::uint32_t cell = 0; cell < kTurns; ++cell) EXPECT_EQ(word_of(cell), 2u) << cell;
}

TEST(CudaSignalPage, AWordThatCannotBeReadLeavesItsTurnWaiting) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  page.pass_turn(5, 0, 3, 4);
  gpu_writes(5, 3);
  fake().failing = "cuMemcpyDtoH";
  fake().fail_with = CUDA_ERROR_UNKNOWN;
  EXPECT_TRUE(page.pass_arrived_turns());
  EXPECT_EQ(word_of(5), 3u);
  fake().failing = "";
  EXPECT_FALSE(page.pass_arrived_turns());
  EXPECT_EQ(word_of(5), 4u);
}

}  // namespace
}  // namespace gpumem::daemon
