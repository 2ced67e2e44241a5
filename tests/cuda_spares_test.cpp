#include "memory/cuda_spares.hpp"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <stdexcept>
#include <thread>

#include "support/eventually.hpp"
#include "support/failing_allocations.hpp"

namespace gpumem::daemon {
namespace {

using namespace std::chrono_literals;
using gpumem::testing::eventually;

constexpr std::uint64_t kLargeRoom = std::uint64_t{1} << 40;

/// Set on the worker's thread by a making that leaves it without memory, until a discard.
thread_local std::optional<gpumem::testing::failing_allocations> worker_out_of_memory;

// Blocks whose pointer is their size, made by a worker the test can hold up, counted in the
// configured pool's room that the test gives.
struct fake_pool {
  explicit fake_pool(family_room& shared) : room(shared) {
    // The worker's log lines make spdlog's registry on first use, which fails where the worker
    // is left without memory; the daemon makes it at start.
    spdlog::default_logger_raw();
  }
  // A test that failed before it opened the gate would otherwise leave the worker waiting there,
  // and the spares' destructor joining it, until ctest's timeout.
  ~fake_pool() {
    try {
      gate.set_value();
    } catch (const std::future_error&) {
      // opened already
    }
  }

  family_room& room;
  std::atomic<int> started{0};  ///< makings that reached the gate
  std::atomic<int> made{0};
  std::atomic<int> discarded{0};
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  bool fail = false;
  bool throw_instead = false;  ///< the making throws, as a driver call that failed does
  /// From this making on (1, 2, ...), the worker's allocations after each fail until it discards
  /// a block; 0: never.
  std::atomic<int> out_of_memory_from{0};

  /// Wants blocks of @p size and starts the worker, which then waits at the gate with the first
  /// one; false if it never gets there.
  bool making(std::uint64_t size) {
    spares.want(size);
    spares.start_wanted();
    return eventually([&] { return started == 1; });
  }

  cuda_spares spares{[this](std::uint64_t size) -> std::optional<exported_block> {
                       ++started;
                       opened.wait();
                       const int making = ++made;
                       if (fail) return std::nullopt;
                       if (throw_instead)
                         throw std::runtime_error("cuMemAllocFromPoolAsync failed");
                       if (out_of_memory_from != 0 && making >= out_of_memory_from) {
                         worker_out_of_memory.emplace();
                       }
                       exported_block block;
                       block.pointer = size;
                       return block;
                     },
                     [this](const exported_block&) {
                       worker_out_of_memory.reset();
                       ++discarded;
                     },
                     room};
};

std::optional<exported_block> take_within(cuda_spares& spares, std::uint64_t size) {
  std::optional<exported_block> block;
  eventually([&] { return (block = spares.take(size)).has_value(); });
  return block;
}

TEST(CudaSpares, AWantedSizeIsMadeTwiceAndEachBlockTakenOnce) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.gate.set_value();
  pool.spares.want(4096);
  pool.spares.want(4096);  // already asked for, both blocks
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
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.gate.set_value();
  pool.spares.want(4096);
  pool.spares.start_wanted();
  ASSERT_TRUE(eventually([&] { return pool.made == 2; }));
  ASSERT_TRUE(pool.spares.take(4096));
  EXPECT_EQ(pool.spares.bytes(), 4096u) << "the other block stays ready";
  pool.spares.want(4096);  // what an allocation asks after taking one
  EXPECT_EQ(pool.spares.bytes(), 2 * 4096u) << "one more wanted, not two";
  pool.spares.start_wanted();
  ASSERT_TRUE(eventually([&] { return pool.made == 3; }));
  EXPECT_TRUE(take_within(pool.spares, 4096));
  EXPECT_TRUE(take_within(pool.spares, 4096));
  EXPECT_FALSE(pool.spares.take(4096));
  EXPECT_EQ(pool.made.load(), 3);
}

TEST(CudaSpares, OnlyTheBlocksThatFitTheRoomAreWanted) {
  family_room room(3 * 4096);
  room.allocated(2 * 4096);
  fake_pool pool(room);
  pool.spares.want(4096);  // room for one block of the two
  EXPECT_EQ(pool.spares.bytes(), 4096u);
  EXPECT_EQ(room.spare_bytes(), 4096u);
  EXPECT_EQ(room.free(), 0u);
  pool.gate.set_value();
}

TEST(CudaSpares, TheInstancesOfAPoolKeepSparesOnlyInTheRoomTheyShare) {
  // Two tenants' instances of one 16 KiB pool: the second tenant's allocation leaves no room
  // for its spares, since the first tenant's spares hold the rest.
  family_room room(4 * 4096);
  fake_pool first(room);
  fake_pool second(room);
  room.allocated(4096);
  first.spares.want(4096);
  EXPECT_EQ(first.spares.bytes(), 2 * 4096u);
  room.allocated(4096);
  second.spares.want(4096);
  EXPECT_EQ(second.spares.bytes(), 0u);
  EXPECT_EQ(room.bytes_in_use() + room.spare_bytes(), room.size());
  first.spares.drain();
  second.spares.want(4096);
  EXPECT_EQ(second.spares.bytes(), 2 * 4096u) << "the room the first tenant's spares gave back";
  first.gate.set_value();
  second.gate.set_value();
}

TEST(CudaSpares, ReadyTellsWhetherTheOwnersNextTakeFindsABlock) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.gate.set_value();
  EXPECT_FALSE(pool.spares.ready(4096));
  pool.spares.want(4096);
  EXPECT_FALSE(pool.spares.ready(4096)) << "wanted, not yet made";
  pool.spares.start_wanted();
  ASSERT_TRUE(eventually([&] { return pool.spares.ready(4096); }));
  EXPECT_FALSE(pool.spares.ready(8192)) << "only that size";
  ASSERT_TRUE(pool.spares.take(4096));
  EXPECT_EQ(room.spare_bytes(), 4096u) << "the taken block left the room's spares";
}

TEST(CudaSpares, ReadyBytesCountOnlyTheBlocksMadeAndNotYetTaken) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.spares.want(4096);
  pool.spares.want(8192);
  pool.spares.start_wanted();
  ASSERT_TRUE(eventually([&] { return pool.started == 1; }));
  EXPECT_EQ(pool.spares.ready_bytes(), 0u) << "wanted and being made, none ready";
  EXPECT_EQ(pool.spares.bytes(), 2 * 4096u + 2 * 8192u);
  pool.gate.set_value();
  ASSERT_TRUE(eventually([&] { return pool.spares.ready_bytes() == 2 * 4096u + 2 * 8192u; }));
  ASSERT_TRUE(pool.spares.take(8192));
  EXPECT_EQ(pool.spares.ready_bytes(), 2 * 4096u + 8192u);
  EXPECT_EQ(pool.spares.bytes(), pool.spares.ready_bytes()) << "nothing is being made";
}

TEST(CudaSpares, NothingIsMadeUntilTheOwnerStartsTheWorker) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.gate.set_value();
  pool.spares.want(4096);
  std::this_thread::sleep_for(50ms);  // the reply that asked for it is still on its way
  EXPECT_EQ(pool.made.load(), 0);
  EXPECT_EQ(pool.spares.bytes(), 2 * 4096u) << "counted from the moment they are wanted";
  pool.spares.start_wanted();
  ASSERT_TRUE(eventually([&] { return pool.made == 2; }));
  EXPECT_TRUE(take_within(pool.spares, 4096));
  EXPECT_TRUE(take_within(pool.spares, 4096));
}

TEST(CudaSpares, SizesThatDoNotFitOrAreTooLargeOrTooManyAreNotPrepared) {
  family_room small_room(4096);
  fake_pool small(small_room);
  small.spares.want(8192);  // no room
  EXPECT_EQ(small.spares.bytes(), 0u);
  small.gate.set_value();
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.spares.want(cuda_spares::kMaxBlockSize + 1);
  EXPECT_EQ(pool.spares.bytes(), 0u);
  for (std::uint64_t i = 1; i <= cuda_spares::kMaxSizes + 3; ++i) pool.spares.want(i * 256);
  std::uint64_t expected = 0;
  for (std::uint64_t i = 1; i <= cuda_spares::kMaxSizes; ++i) {
    expected += cuda_spares::kBlocksPerSize * i * 256;
  }
  EXPECT_EQ(pool.spares.bytes(), expected) << "counted while wanted, before they are made";
  pool.gate.set_value();
  pool.spares.start_wanted();
  const int blocks = static_cast<int>(cuda_spares::kMaxSizes * cuda_spares::kBlocksPerSize);
  ASSERT_TRUE(eventually([&] { return pool.made == blocks; }));
  pool.spares.want((cuda_spares::kMaxSizes + 4) * 256);
  EXPECT_EQ(pool.spares.bytes(), expected) << "the sizes made count as kept, as the wanted ones";
}

TEST(CudaSpares, AllSparesTogetherHoldAtMostTheirByteLimit) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  for (std::uint64_t i = 0; i < cuda_spares::kMaxSizes; ++i) {
    pool.spares.want(cuda_spares::kMaxBlockSize - i * 4096);
  }
  EXPECT_LE(pool.spares.bytes(), cuda_spares::kMaxBytes);
  EXPECT_GT(pool.spares.bytes(), cuda_spares::kMaxBytes - cuda_spares::kMaxBlockSize)
      << "as many blocks as fit";
  pool.gate.set_value();
}

TEST(CudaSpares, DrainGivesBackEveryReadyBlock) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.spares.want(512);
  pool.spares.start_wanted();
  pool.gate.set_value();
  ASSERT_TRUE(take_within(pool.spares, 512));
  pool.spares.want(512);
  pool.spares.start_wanted();
  ASSERT_TRUE(eventually([&] { return pool.made == 3; }));
  std::this_thread::sleep_for(50ms);  // it is stored under the lock right after it is made
  const auto drained = pool.spares.drain();
  ASSERT_EQ(drained.size(), 1u) << "one size";
  ASSERT_TRUE(drained.contains(512));
  EXPECT_EQ(drained.at(512).size(), 2u);
  EXPECT_EQ(pool.spares.bytes(), 0u);
  EXPECT_EQ(room.spare_bytes(), 0u);
  EXPECT_EQ(pool.discarded.load(), 0) << "ready blocks go back to the owner";
}

TEST(CudaSpares, ABlockFinishedAfterADrainIsDiscardedNotLeaked) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  ASSERT_TRUE(pool.making(1024)) << "the worker waits at the gate with a block of it";
  EXPECT_TRUE(pool.spares.drain().empty());
  pool.gate.set_value();
  ASSERT_TRUE(eventually([&] { return pool.discarded >= 1; }));
  EXPECT_FALSE(pool.spares.take(1024));
  EXPECT_EQ(pool.spares.bytes(), 0u);
  EXPECT_EQ(room.spare_bytes(), 0u) << "given back once, by the drain";
}

TEST(CudaSpares, AFailedBlockGivesItsBudgetBack) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.fail = true;
  pool.spares.want(2048);
  pool.spares.start_wanted();
  pool.gate.set_value();
  ASSERT_TRUE(eventually([&] { return pool.spares.bytes() == 0; }));
  EXPECT_EQ(room.spare_bytes(), 0u);
  EXPECT_FALSE(pool.spares.take(2048));
}

TEST(CudaSpares, AMadeBlockWithNoMemoryToStoreItIsDiscardedAndTheWorkerGoesOn) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.out_of_memory_from = 1;
  ASSERT_TRUE(pool.making(2048));
  pool.gate.set_value();
  ASSERT_TRUE(eventually([&] { return pool.discarded == 2; }))
      << "both blocks made and given back, the daemon still running";
  EXPECT_EQ(pool.spares.bytes(), 0u);
  EXPECT_EQ(room.spare_bytes(), 0u);
  EXPECT_FALSE(pool.spares.ready(2048)) << "no empty list of ready blocks";
  EXPECT_EQ(pool.spares.counted().made, 0u);
  pool.out_of_memory_from = 0;
  pool.spares.want(2048);
  pool.spares.start_wanted();
  EXPECT_TRUE(take_within(pool.spares, 2048)) << "once memory is back, blocks are kept again";
}

TEST(CudaSpares, ASecondBlockWithNoMemoryToStoreItIsDiscardedAndTheFirstStaysReady) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.out_of_memory_from = 2;
  ASSERT_TRUE(pool.making(2048));
  pool.gate.set_value();
  ASSERT_TRUE(eventually([&] { return pool.discarded == 1; }));
  EXPECT_EQ(pool.spares.counted().made, 1u);
  EXPECT_EQ(pool.spares.bytes(), 2048u) << "the first block, ready";
  EXPECT_EQ(room.spare_bytes(), 2048u);
  ASSERT_TRUE(pool.spares.ready(2048));
  const auto taken = pool.spares.take(2048);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->pointer, 2048u);
  EXPECT_FALSE(pool.spares.ready(2048));
}

TEST(CudaSpares, AMakingThatThrowsIsLoggedAsNoBlockAndTheWorkerGoesOn) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.throw_instead = true;
  ASSERT_TRUE(pool.making(2048));
  pool.gate.set_value();
  ASSERT_TRUE(eventually([&] { return pool.made == 2 && pool.spares.bytes() == 0; }))
      << "both makings threw, their budget given back, the daemon still running";
  EXPECT_EQ(room.spare_bytes(), 0u);
  EXPECT_FALSE(pool.spares.ready(2048));
  EXPECT_EQ(pool.discarded.load(), 0) << "nothing was made to give back";
  pool.throw_instead = false;
  pool.spares.want(2048);
  pool.spares.start_wanted();
  EXPECT_TRUE(take_within(pool.spares, 2048)) << "the next making works";
}

exported_block released_at(CUdeviceptr pointer) {
  return exported_block{pointer, {}};
}

TEST(CudaSpares, AReleasedBlockOfferedInPlaceOfAWantedOneIsReadyAndOnlyTheOtherIsMade) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.gate.set_value();
  pool.spares.want(4096);
  ASSERT_TRUE(pool.spares.offer(4096, released_at(0xa000)));
  EXPECT_EQ(pool.spares.bytes(), 2 * 4096u) << "the offered block took a wanted one's place";
  EXPECT_EQ(room.spare_bytes(), 2 * 4096u) << "counted once in the room";
  const auto taken = pool.spares.take(4096);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->pointer, 0xa000u);
  pool.spares.start_wanted();
  ASSERT_TRUE(take_within(pool.spares, 4096));
  EXPECT_EQ(pool.made.load(), 1) << "one block made, for the wish the offer did not meet";
  EXPECT_EQ(pool.spares.counted().made, 1u);
  EXPECT_EQ(pool.spares.counted().reused, 1u);
}

TEST(CudaSpares, ABlockBeingMadeWhileAnOfferTookItsPlaceIsDiscardedOnceMade) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  ASSERT_TRUE(pool.making(1024)) << "the worker waits at the gate with a block of it";
  ASSERT_TRUE(pool.spares.offer(1024, released_at(0xa000)));
  ASSERT_TRUE(pool.spares.offer(1024, released_at(0xb000)));
  EXPECT_FALSE(pool.spares.offer(1024, released_at(0xc000))) << "two blocks of a size at most";
  pool.gate.set_value();
  ASSERT_TRUE(eventually([&] { return pool.discarded == 1; }));
  EXPECT_EQ(pool.made.load(), 1) << "nothing more is made";
  EXPECT_EQ(pool.spares.bytes(), 2 * 1024u);
  EXPECT_EQ(room.spare_bytes(), 2 * 1024u);
  for (const CUdeviceptr expected : {0xb000u, 0xa000u}) {
    const auto taken = pool.spares.take(1024);
    ASSERT_TRUE(taken);
    EXPECT_EQ(taken->pointer, expected);
  }
  EXPECT_EQ(pool.spares.counted().made, 0u) << "the discarded block was not kept";
}

TEST(CudaSpares, OfferedBlocksAreKeptOnlyOnTheTermsWantedOnesAre) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.gate.set_value();
  EXPECT_TRUE(pool.spares.offer(4096, released_at(0x1000))) << "beside the ready ones";
  EXPECT_TRUE(pool.spares.offer(4096, released_at(0x2000)));
  EXPECT_FALSE(pool.spares.offer(4096, released_at(0x3000))) << "two blocks of a size at most";
  EXPECT_FALSE(pool.spares.offer(cuda_spares::kMaxBlockSize + 1, released_at(0x4000)));
  for (std::uint64_t i = 2; i <= cuda_spares::kMaxSizes; ++i) {
    EXPECT_TRUE(pool.spares.offer(i * 4096, released_at(i << 16))) << "size " << i;
  }
  EXPECT_FALSE(pool.spares.offer(1024, released_at(0x5000))) << "a ninth size";
  EXPECT_EQ(pool.spares.counted().reused, cuda_spares::kMaxSizes + 1);
  EXPECT_EQ(pool.made.load(), 0);

  family_room small_room(4096);
  fake_pool small(small_room);
  small.gate.set_value();
  EXPECT_FALSE(small.spares.offer(8192, released_at(0x1000))) << "no room in the pool's size";
  EXPECT_EQ(small_room.spare_bytes(), 0u);
  small.spares.stop();
  EXPECT_FALSE(small.spares.offer(4096, released_at(0x1000))) << "stopped: the owner frees it";
}

TEST(CudaSpares, OfferedBlocksCountInTheByteLimitAndComeBackInADrain) {
  family_room room(kLargeRoom);
  fake_pool pool(room);
  pool.gate.set_value();
  constexpr std::uint64_t kLargest = cuda_spares::kMaxBlockSize;
  constexpr std::uint64_t kFit = cuda_spares::kMaxBytes / kLargest;  // blocks of that size
  std::uint64_t offered = 0;
  for (std::uint64_t i = 0; i < kFit; ++i) {
    // Sizes a page apart, two blocks each: the byte limit is met before the count of sizes.
    if (pool.spares.offer(kLargest - (i / 2) * 4096, released_at((i + 1) << 16))) ++offered;
  }
  EXPECT_EQ(offered, kFit);
  EXPECT_FALSE(pool.spares.offer(kLargest - 8 * 4096, released_at(0xf000)))
      << "a fifth size, past the byte limit";
  EXPECT_LE(pool.spares.bytes(), cuda_spares::kMaxBytes);
  const auto drained = pool.spares.drain();
  std::uint64_t blocks = 0;
  for (const auto& [size, kept] : drained) blocks += kept.size();
  EXPECT_EQ(blocks, kFit) << "every offered block goes back to the owner";
  EXPECT_EQ(pool.spares.bytes(), 0u);
  EXPECT_EQ(room.spare_bytes(), 0u);
  EXPECT_EQ(pool.discarded.load(), 0);
}

}  // namespace
}  // namespace gpumem::daemon
