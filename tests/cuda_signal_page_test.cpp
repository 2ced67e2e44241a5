// The daemon's signal page on a CUDA device, on the fake driver: how long the daemon waits for
// the writes on its repairs stream to land (another stream that waits for a client can hold it
// up through a shared hardware queue, so the wait is bounded, and only the first request after
// the hold-up pays the bound), and how it passes on the turns of dead stream-lock holders.
#include "sync/cuda_signal_page.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstddef>

#include "books.hpp"
#include "gpumem/shared/sync/host_lock.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "request_error.hpp"
#include "restart/state_records.hpp"
#include "support/fake_driver.hpp"
#include "support/host_pools.hpp"

namespace gpumem::daemon {
namespace {

using namespace std::chrono_literals;
using gpumem::testing::fake;
using gpumem::testing::fake_driver;
using gpumem::testing::fake_word_in_the_range;
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

/// What a live client's stream would write: the word as the GPU holds it.
void gpu_writes(std::uint32_t cell, std::uint32_t value) {
  fake_word_in_the_range(cell * sync::kSignalCellSize) = value;
}

std::uint32_t word_of(std::uint32_t cell) {
  return fake_word_in_the_range(cell * sync::kSignalCellSize);
}

TEST(CudaSignalPage, TurnsOfDeadClientsPassOnAsTheyComeAndWaitForNoOtherLocksTurn) {
  reset_fake_driver();
  {
    cuda_signal_page page(fake_driver(), 0);
    // A dead client's turns in two locks, the inner one's given first: it comes only once a
    // live client that nests the locks got the outer one, whose turn is given second.
    constexpr std::uint32_t kInner = 1, kOuter = 2;
    gpu_writes(kInner, 7);
    page.pass_turn(kInner, 0, 8, 9);
    gpu_writes(kOuter, 3);
    page.pass_turn(kOuter, 0, 4, 5);
    EXPECT_GT(page.waiting_turn_count(), 0u);
    EXPECT_EQ(word_of(kInner), 7u);
    EXPECT_EQ(word_of(kOuter), 3u) << "a turn that has not come was passed on";

    gpu_writes(kOuter, 4);  // the outer lock's holder released it
    EXPECT_TRUE(page.pass_arrived_turns()) << "the inner lock's turn has not come yet";
    EXPECT_EQ(word_of(kOuter), 5u) << "the outer lock's turn waited behind the inner one's";
    EXPECT_EQ(word_of(kInner), 7u);

    gpu_writes(kInner, 8);  // the live client got the outer lock and released the inner one
    EXPECT_TRUE(page.pass_arrived_turns());
    EXPECT_EQ(word_of(kInner), 9u);
    EXPECT_EQ(page.waiting_turn_count(), 1u)
        << "a turn passed on waits until its write is seen landed, the other one did not";
    EXPECT_FALSE(page.pass_arrived_turns());
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
  // Both stay listed until a look sees their writes landed: a record of the page written
  // before then must still hold them.
  EXPECT_EQ(page.waiting_turn_count(), 2u);
  EXPECT_FALSE(page.pass_arrived_turns());
  EXPECT_EQ(word_of(3), 7u);
}

TEST(CudaSignalPage, ATurnTheWordHasMovedPastWaitsNoLongerAndIsNotWritten) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  // The dead client's stream released turn 5 before the process died.
  gpu_writes(3, 6);
  page.pass_turn(3, 0, 5, 6);
  EXPECT_EQ(page.waiting_turn_count(), 0u);
  // Tickets wrap at 16 bits: 0xfffe is past for a word of 2.
  gpu_writes(4, 2);
  page.pass_turn(4, 0, 0xfffe, 0xffff);
  // Half the ticket space ahead of the word is behind it.
  gpu_writes(5, 2);
  page.pass_turn(5, 0, 2 + sync::kHalfTheTickets, 3 + sync::kHalfTheTickets);
  EXPECT_EQ(page.waiting_turn_count(), 0u);
  EXPECT_EQ(word_of(3), 6u);
  EXPECT_EQ(word_of(4), 2u);
  EXPECT_EQ(word_of(5), 2u);

  // A turn more than a lock's queue ahead still waits: live clients queue past the entries of
  // dead ones, which the daemon clears.
  page.pass_turn(5, 0, 2 + sync::kLockQueueLength + 2, 3 + sync::kLockQueueLength + 2);
  EXPECT_EQ(page.waiting_turn_count(), 1u);
}

TEST(CudaSignalPage, AClearedCellsTurnsNoLongerWait) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  page.pass_turn(4, 0, 2, 3);
  ASSERT_GT(page.waiting_turn_count(), 0u);
  page.clear(4);
  EXPECT_EQ(page.waiting_turn_count(), 0u);
  // The cell's next lock reaches that value of its own: the dead client's turn is not passed.
  gpu_writes(4, 2);
  EXPECT_FALSE(page.pass_arrived_turns());
  EXPECT_EQ(word_of(4), 2u);
}

TEST(CudaSignalPage, EachLookAtWaitingTurnsReadsABoundedNumberOfWordsAndGoesOnWhereItStopped) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  // Many turns that have not come, given before a few that come: every look reads a bounded
  // number of words, and the next goes on where it stopped, so the later ones are reached.
  constexpr std::uint32_t kWaiting = 40, kComing = 8;
  for (std::uint32_t cell = 0; cell < kWaiting + kComing; ++cell) page.pass_turn(cell, 0, 1, 2);
  for (std::uint32_t cell = kWaiting; cell < kWaiting + kComing; ++cell) gpu_writes(cell, 1);
  int passed_after = 0;
  for (int look = 1; look <= 4 && passed_after == 0; ++look) {
    const int reads_before = fake().calls["cuMemcpyDtoH"];
    EXPECT_TRUE(page.pass_arrived_turns());
    EXPECT_LT(fake().calls["cuMemcpyDtoH"] - reads_before, static_cast<int>(kWaiting))
        << "one look read every waiting turn's word";
    if (word_of(kWaiting) == 2u) passed_after = look;
  }
  EXPECT_EQ(passed_after, 2) << "the looks did not go on where the one before stopped";
  for (std::uint32_t cell = kWaiting; cell < kWaiting + kComing; ++cell) {
    EXPECT_EQ(word_of(cell), 2u) << cell;
  }
  EXPECT_EQ(word_of(0), 0u);
}

TEST(CudaSignalPage, OneReadOfALocksWordTellsEveryTurnWaitingInIt) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  // A dead client's turns alternate with a live one's in one lock, more of them than one look
  // reads words: the one that comes is passed on at the next look, wherever it is listed.
  constexpr std::uint32_t kTurns = 40;
  for (std::uint32_t n = 1; n <= kTurns; ++n) page.pass_turn(8, 0, 2 * n, 2 * n + 1);
  gpu_writes(8, 2 * kTurns);
  const int reads_before = fake().calls["cuMemcpyDtoH"];
  EXPECT_TRUE(page.pass_arrived_turns());
  EXPECT_EQ(fake().calls["cuMemcpyDtoH"] - reads_before, 1);
  EXPECT_EQ(word_of(8), 2 * kTurns + 1);
  EXPECT_EQ(page.waiting_turn_count(), 1u) << "the turns the word is past are gone";
}

TEST(CudaSignalPage, NoTurnIsToldBeforeTheRepairsLandAndAPassedOneLeavesOnceItsWriteHas) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  // The word shows the turn, but a write queued before (a clear's zeroes, say) has not landed:
  // what the word will be is not known yet.
  gpu_writes(6, 3);
  hold_up_repairs(true);
  page.pass_turn(6, 0, 3, 4);
  EXPECT_TRUE(page.pass_arrived_turns());
  EXPECT_EQ(word_of(6), 3u) << "a turn was passed on a word read before the repairs landed";
  hold_up_repairs(false);
  EXPECT_TRUE(page.pass_arrived_turns());
  EXPECT_EQ(word_of(6), 4u);
  hold_up_repairs(true);
  EXPECT_TRUE(page.pass_arrived_turns()) << "a pass left before its write was seen landed";
  hold_up_repairs(false);
  const int writes = fake().calls["cuStreamWriteValue32"];
  // The lock went on and round its 16-bit tickets to this turn again before the next look: a
  // live holder's turn now, not the dead client's.
  gpu_writes(6, 3);
  EXPECT_FALSE(page.pass_arrived_turns());
  EXPECT_EQ(word_of(6), 3u);
  EXPECT_EQ(fake().calls["cuStreamWriteValue32"], writes) << "a passed turn was written again";
}

TEST(CudaSignalPage, AWordThatCannotBeReadOrWrittenLeavesItsTurnWaiting) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  gpu_writes(5, 3);
  fake().fail_with = CUDA_ERROR_UNKNOWN;
  fake().failing = "cuMemcpyDtoH";
  page.pass_turn(5, 0, 3, 4);
  EXPECT_TRUE(page.pass_arrived_turns());
  fake().failing = "cuStreamWriteValue32";
  EXPECT_TRUE(page.pass_arrived_turns());
  EXPECT_EQ(word_of(5), 3u);
  fake().failing = "";
  EXPECT_TRUE(page.pass_arrived_turns());
  EXPECT_EQ(word_of(5), 4u);
  EXPECT_FALSE(page.pass_arrived_turns());
}

/// Books on the fake driver with a stream-ordered lock: the holder's stream is served ticket
/// 0, and a client that dies (remove_client(dying)) queued ticket 1 behind it.
class BooksWithAStreamLock : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::uint16_t holder_slot = book.sync.attach(holder).slot;
    const std::uint16_t dying_slot = book.sync.attach(dying).slot;
    proto::sync_open_request request{};
    ASSERT_FALSE(proto::make_wire_name("streamed", request.name));
    request.kind = proto::sync_kind::lock;
    opened = book.sync.open(holder, request).reply;
    book.sync.open(dying, request);
    book.sync.signal_page_of(holder, opened.page, 0);
    host_page = ::mmap(nullptr, sync::kHostPageSize, PROT_READ | PROT_WRITE, MAP_SHARED,
                       book.sync.page_for(holder, opened.page).fd(), 0);
    ASSERT_NE(host_page, MAP_FAILED);
    index = sync::index_of_cell(opened.cell);
    auto& cell = *reinterpret_cast<sync::lock_cell*>(static_cast<std::byte*>(host_page) +
                                                     index * sync::kCellSize);
    cell.domain = sync::domain_word(sync::domain::stream, 0);
    ASSERT_EQ(sync::host_lock(cell, holder_slot).take_stream_ticket(), 0);
    ASSERT_EQ(sync::host_lock(cell, dying_slot).take_stream_ticket(), 1);
  }
  void TearDown() override {
    if (host_page != MAP_FAILED) ::munmap(host_page, sync::kHostPageSize);
    EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();
  }
  static books make_books() {
    reset_fake_driver();
    daemon_config config = embedded_default_config();
    config.pools[0].size = 4 << 20;
    return books(config, host_pools, {}, cuda_signal_page_maker(fake_driver()));
  }
  /// The lock's turn on the signal page, as the GPU holds it.
  std::uint32_t& serving() const {
    return fake_word_in_the_range(index * sync::kSignalCellSize +
                                  offsetof(sync::signal_cell, serving));
  }

  books book = make_books();
  client_id holder = book.add_client({200, 1000, 1000, {}});
  client_id dying = book.add_client({201, 1000, 1000, {}});
  proto::sync_open_reply opened{};
  void* host_page = MAP_FAILED;
  std::uint32_t index = 0;
};

TEST_F(BooksWithAStreamLock, TheBooksLookAtADeadClientsTurnUntilItComesAndThenStop) {
  book.remove_client(dying);
  EXPECT_TRUE(book.sync.has_pending()) << "the dead client's turn waits for nobody to look";
  EXPECT_FALSE(book.sync.settle());
  EXPECT_EQ(serving(), 0u);
  serving() = 1;  // the holder's stream released
  EXPECT_FALSE(book.sync.settle()) << "passed on, and waits until its write is seen";
  EXPECT_EQ(serving(), 2u);
  EXPECT_TRUE(book.sync.settle());
  EXPECT_EQ(serving(), 2u);
  EXPECT_FALSE(book.sync.has_pending());
}

TEST_F(BooksWithAStreamLock, AWaitingTurnIsInItsPagesRestartRecordAndIsAdoptedOnlyForTheSameLock) {
  book.remove_client(dying);
  const restart::record_key key{restart::record_type::page, opened.page};
  const auto body = restart::encode(book, key);
  ASSERT_TRUE(body);
  const restart::state_image image = restart::decode({{key, *body}});
  const auto& waiting = image.pages.at(opened.page).waiting_turns;
  ASSERT_EQ(waiting.size(), 1u);
  const object_id lock = book.sync.page_by_id(opened.page)->object_in(index);
  EXPECT_EQ(waiting[0].device, 0);
  EXPECT_EQ(waiting[0].lock, lock);
  EXPECT_EQ(waiting[0].epoch, book.sync.cell_of(lock)->epoch);
  EXPECT_EQ(waiting[0].turn.cell, index);
  EXPECT_EQ(waiting[0].turn.turn, 1u);
  EXPECT_EQ(waiting[0].turn.next_turn, 2u);

  signal_page& signals = *book.sync.page_by_id(opened.page)->signal_page_on(0);
  const auto adopted = [&](object_id which, std::uint32_t epoch, std::uint32_t turn) {
    const std::size_t before = signals.waiting_turn_count();
    try {
      book.sync.adopt_waiting_turn(opened.page, 0, which, epoch, {index, 0, turn, turn + 1});
    } catch (const request_error&) {
      return false;
    }
    return signals.waiting_turn_count() == before + 1;
  };
  const std::uint32_t epoch = waiting[0].epoch;
  EXPECT_FALSE(adopted(lock + 1, epoch, 1)) << "another lock's turn";
  EXPECT_FALSE(adopted(lock, epoch + 1, 1)) << "a turn of the lock before a reset";
  EXPECT_FALSE(adopted(lock, epoch, 2)) << "a ticket not taken yet";
  // Without the check, the word at the turn would have it passed on and kept.
  serving() = 0x10000 + 2 - 0x8001;
  EXPECT_FALSE(adopted(lock, epoch, 0x10000 + 2 - 0x8001))
      << "a turn more than half the ticket space behind the next ticket, so long passed";
  serving() = 0;
  EXPECT_TRUE(adopted(lock, epoch, 1));
  EXPECT_EQ(serving(), 0u) << "an adopted turn that has not come was passed on";
}

}  // namespace
}  // namespace gpumem::daemon
