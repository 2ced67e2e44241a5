// The daemon's signal page on a CUDA device, on the fake driver: how long the daemon waits for
// the writes on its repairs stream to land (another stream that waits for a client can hold it
// up through a shared hardware queue, so the wait is bounded, and only the first request after
// the hold-up pays the bound), and how it passes on the turns of dead stream-lock holders.
#include "sync/cuda_signal_page.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

#include "books.hpp"
#include "gpumem/shared/sync/host_lock.hpp"
#include "gpumem/shared/sync/layout.hpp"
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

/// Every stream, the repairs' and the reads', queries as not drained from now on, or drained
/// again.
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
    EXPECT_EQ(fake().calls["cuStreamQuery"] - queried, 3)
        << "while still held up, a clear looked before and after its zeroes, a read once, and "
           "each went on";

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

/// Turns a page said wait no more, as cell and turn.
using told_turns = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

/// One look at the page's waiting turns, adding those that wait no more to @p told.
bool look(cuda_signal_page& page, told_turns& told) {
  return page.pass_arrived_turns(
      [&](std::uint32_t cell, std::uint32_t turn) { told.emplace_back(cell, turn); });
}

bool look(cuda_signal_page& page) {
  told_turns ignored;
  return look(page, ignored);
}

// A look decides on the words of the read queued by the look before it (or by pass_turn()),
// which the fake driver copies at once, as a stream with nothing before the copy would; it
// then queues the next read. So a turn is passed at the second look after its word came.

TEST(CudaSignalPage, TurnsOfDeadClientsPassOnAsTheyComeAndWaitForNoOtherLocksTurn) {
  reset_fake_driver();
  {
    cuda_signal_page page(fake_driver(), 0);
    // A dead client's turns in two locks, the inner one's given first: it comes only once a
    // live client that nests the locks got the outer one, whose turn is given second.
    constexpr std::uint32_t kInner = 1, kOuter = 2;
    gpu_writes(kInner, 7);
    gpu_writes(kOuter, 3);
    page.pass_turn(kInner, 8, 9);
    page.pass_turn(kOuter, 4, 5);
    told_turns told;
    EXPECT_TRUE(look(page, told));
    EXPECT_EQ(word_of(kInner), 7u);
    EXPECT_EQ(word_of(kOuter), 3u) << "a turn that has not come was passed on";

    gpu_writes(kOuter, 4);  // the outer lock's holder released it
    EXPECT_TRUE(look(page, told));
    EXPECT_TRUE(look(page, told)) << "the inner lock's turn has not come yet";
    EXPECT_EQ(word_of(kOuter), 5u) << "the outer lock's turn waited behind the inner one's";
    EXPECT_EQ(word_of(kInner), 7u);

    gpu_writes(kInner, 8);  // the live client got the outer lock and released the inner one
    EXPECT_TRUE(look(page, told));
    EXPECT_TRUE(look(page, told));
    EXPECT_EQ(word_of(kInner), 9u);
    EXPECT_EQ(page.waiting_turn_count(), 1u)
        << "a turn passed on waits until its write is seen landed, the other one did not";
    EXPECT_FALSE(look(page, told));
    EXPECT_EQ(told, (told_turns{{kOuter, 4}, {kInner, 8}}))
        << "the daemon was not told to free the entries";
    EXPECT_EQ(fake().calls["cuMemcpyDtoH"], 0) << "the daemon waited for a read";
  }
  EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();
}

TEST(CudaSignalPage, ADeadClientsTurnsInOneLockPassOneAfterTheOther) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  gpu_writes(3, 5);
  page.pass_turn(3, 5, 6);
  page.pass_turn(3, 6, 7);
  told_turns told;
  EXPECT_TRUE(look(page, told));
  EXPECT_EQ(word_of(3), 6u);
  EXPECT_TRUE(look(page, told));
  EXPECT_EQ(word_of(3), 7u);
  // Both stay listed until a read queued after their writes lands: their queue entries stay
  // taken until then.
  EXPECT_EQ(told, (told_turns{{3, 5}}));
  EXPECT_FALSE(look(page, told));
  EXPECT_EQ(told, (told_turns{{3, 5}, {3, 6}}));
  EXPECT_EQ(word_of(3), 7u);
}

TEST(CudaSignalPage, ATurnTheWordHasMovedPastWaitsNoLongerAndIsNotWritten) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  gpu_writes(3, 6);  // the dead client's stream released turn 5 before the process died
  gpu_writes(4, 2);  // tickets wrap at 16 bits: 0xfffe is past for a word of 2
  // A turn still to come is less than a lock's queue ahead of its word: one that far is behind.
  gpu_writes(5, 2);
  gpu_writes(6, 2);
  page.pass_turn(3, 5, 6);
  page.pass_turn(4, 0xfffe, 0xffff);
  page.pass_turn(5, 2 + sync::kTurnsAheadBound, 3 + sync::kTurnsAheadBound);
  page.pass_turn(6, 1 + sync::kTurnsAheadBound, 2 + sync::kTurnsAheadBound);
  told_turns told;
  EXPECT_TRUE(look(page, told));
  EXPECT_TRUE(look(page, told));
  EXPECT_EQ(told, (told_turns{{3, 5}, {4, 0xfffe}, {5, 2 + sync::kTurnsAheadBound}}));
  EXPECT_EQ(page.waiting_turn_count(), 1u) << "the turn just within a queue ahead waits on";
  EXPECT_EQ(word_of(3), 6u);
  EXPECT_EQ(word_of(4), 2u);
  EXPECT_EQ(word_of(5), 2u);
  EXPECT_EQ(word_of(6), 2u);
}

TEST(CudaSignalPage, AClearedCellsTurnsNoLongerWait) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  page.pass_turn(4, 2, 3);
  ASSERT_GT(page.waiting_turn_count(), 0u);
  page.clear(4);
  EXPECT_EQ(page.waiting_turn_count(), 0u);
  // The cell's next lock reaches that value of its own: the dead client's turn is not passed,
  // and the cell's new queue is not told of it.
  gpu_writes(4, 2);
  told_turns told;
  EXPECT_FALSE(look(page, told));
  EXPECT_TRUE(told.empty());
  EXPECT_EQ(word_of(4), 2u);
}

TEST(CudaSignalPage, ATurnIsToldOnlyByAReadQueuedAfterItWasGiven) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  gpu_writes(4, 7);
  page.pass_turn(5, 1, 2);  // queues a read, which finds cell 4 at 7
  page.clear(4);            // the cell's next lock starts from zero
  page.pass_turn(4, 7, 8);  // a dead client's turn in that lock, seven tickets on
  EXPECT_TRUE(look(page));
  EXPECT_EQ(word_of(4), 0u) << "decided on a read queued before the turn was given";
  EXPECT_TRUE(look(page));
  EXPECT_EQ(word_of(4), 0u);
}

TEST(CudaSignalPage, OneCopyPerLookTellsEveryTurnOfEveryLock) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  // Many locks whose turns have not come, a few whose turns have, and many turns of one lock
  // that alternate with a live client's: one look passes on every turn that came.
  constexpr std::uint32_t kWaiting = 40, kComing = 8, kTurns = 40;
  constexpr std::uint32_t kOneLock = kWaiting + kComing;
  for (std::uint32_t cell = kWaiting; cell < kOneLock; ++cell) gpu_writes(cell, 1);
  gpu_writes(kOneLock, 2 * kTurns);
  for (std::uint32_t cell = 0; cell < kOneLock; ++cell) page.pass_turn(cell, 1, 2);
  for (std::uint32_t n = 1; n <= kTurns; ++n) page.pass_turn(kOneLock, 2 * n, 2 * n + 1);
  EXPECT_TRUE(look(page));  // the read pass_turn() queued was before most turns were given
  const int copies_before = fake().calls["cuMemcpy2DAsync"];
  told_turns told;
  EXPECT_TRUE(look(page, told));
  EXPECT_EQ(fake().calls["cuMemcpy2DAsync"] - copies_before, 1) << "one copy per look";
  for (std::uint32_t cell = kWaiting; cell < kOneLock; ++cell) {
    EXPECT_EQ(word_of(cell), 2u) << cell;
  }
  EXPECT_EQ(word_of(0), 0u);
  EXPECT_EQ(word_of(kOneLock), 2 * kTurns + 1);
  EXPECT_EQ(told.size(), kTurns - 1) << "the turns the one lock's word is past";
  EXPECT_EQ(page.waiting_turn_count(), kWaiting + kComing + 1);
}

TEST(CudaSignalPage, NoTurnIsToldBeforeTheReadLandsAndAPassedOneLeavesOnceItsWriteHas) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  // The read is queued behind repairs that have not landed: nothing can be told from it yet.
  gpu_writes(6, 3);
  hold_up_repairs(true);
  page.pass_turn(6, 3, 4);
  told_turns told;
  EXPECT_TRUE(look(page, told));
  EXPECT_EQ(word_of(6), 3u) << "a turn was passed on a read that had not landed";
  hold_up_repairs(false);
  EXPECT_TRUE(look(page, told));
  EXPECT_EQ(word_of(6), 4u);
  hold_up_repairs(true);
  EXPECT_TRUE(look(page, told)) << "a pass left before its write was seen landed";
  EXPECT_TRUE(told.empty()) << "an entry would be freed before its turn's pass landed";
  hold_up_repairs(false);
  const int writes = fake().calls["cuStreamWriteValue32"];
  // Whatever the word shows by then, a passed turn is not written again: here the turn itself,
  // which a lock shows again only once it has gone round its 16-bit tickets.
  gpu_writes(6, 3);
  EXPECT_FALSE(look(page, told));
  EXPECT_EQ(told, (told_turns{{6, 3}}));
  EXPECT_EQ(word_of(6), 3u);
  EXPECT_EQ(fake().calls["cuStreamWriteValue32"], writes) << "a passed turn was written again";
}

TEST(CudaSignalPage, AReadRunsOnAStreamOfItsOwnBehindTheRepairsIntoRegisteredMemory) {
  reset_fake_driver();
  {
    cuda_signal_page page(fake_driver(), 0);
    page.pass_turn(2, 1, 2);
    EXPECT_EQ(fake().calls["cuEventRecord"], 1);
    EXPECT_EQ(fake().calls["cuStreamWaitEvent"], 1);
    EXPECT_EQ(fake().live_count(gpumem::testing::kind::stream), 2u);
    EXPECT_EQ(fake().live_count(gpumem::testing::kind::registration), 1u);
  }
  EXPECT_EQ(fake().live_count(gpumem::testing::kind::registration), 0u)
      << "a landed read's memory stayed registered";
  EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();
  EXPECT_EQ(fake().retained(), 0);
}

TEST(CudaSignalPage, AReadLeftByTurnsThatHaveAllGoneIsNotWaitedFor) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  hold_up_repairs(true);
  page.pass_turn(2, 1, 2);
  page.clear(2);  // its only turn goes while its read is on its way
  hold_up_repairs(false);
  const int copies = fake().calls["cuMemcpy2DAsync"];
  gpu_writes(3, 1);
  page.pass_turn(3, 1, 2);
  EXPECT_EQ(fake().calls["cuMemcpy2DAsync"], copies + 1) << "the new turn waited for the old read";
  EXPECT_TRUE(look(page));
  EXPECT_EQ(word_of(3), 2u);
}

TEST(CudaSignalPage, AReadOrWriteThatFailsLeavesTheTurnWaiting) {
  reset_fake_driver();
  cuda_signal_page page(fake_driver(), 0);
  gpu_writes(5, 3);
  fake().fail_with = CUDA_ERROR_UNKNOWN;
  fake().failing = "cuMemcpy2DAsync";
  page.pass_turn(5, 3, 4);
  EXPECT_TRUE(look(page));
  fake().failing = "cuStreamWriteValue32";
  EXPECT_TRUE(look(page));  // queues the read
  EXPECT_TRUE(look(page));  // the write fails
  EXPECT_EQ(word_of(5), 3u);
  fake().failing = "";
  EXPECT_TRUE(look(page));
  EXPECT_EQ(word_of(5), 4u);
  EXPECT_FALSE(look(page));
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
    cell = reinterpret_cast<sync::lock_cell*>(static_cast<std::byte*>(host_page) +
                                              index * sync::kCellSize);
    cell->domain = sync::domain_word(sync::domain::stream, 0);
    ASSERT_EQ(sync::host_lock(*cell, holder_slot).try_take_stream_ticket(), 0);
    ASSERT_EQ(sync::host_lock(*cell, dying_slot).try_take_stream_ticket(), 1);
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
  /// The queue entry of @p ticket on the host page.
  sync::queue_entry entry(std::uint16_t ticket) const {
    return sync::queue_entry::decode(
        std::atomic_ref<std::uint32_t>(cell->queue[ticket % sync::kLockQueueLength])
            .load(std::memory_order_acquire));
  }

  books book = make_books();
  client_id holder = book.add_client({200, 1000, 1000, {}});
  client_id dying = book.add_client({201, 1000, 1000, {}});
  proto::sync_open_reply opened{};
  void* host_page = MAP_FAILED;
  std::uint32_t index = 0;
  sync::lock_cell* cell = nullptr;
};

TEST_F(BooksWithAStreamLock, TheBooksLookAtADeadClientsTurnUntilItComesAndThenStop) {
  book.remove_client(dying);
  EXPECT_TRUE(book.sync.has_pending()) << "the dead client's turn waits for nobody to look";
  EXPECT_FALSE(book.sync.settle());
  EXPECT_EQ(serving(), 0u);
  serving() = 1;  // the holder's stream released
  EXPECT_FALSE(book.sync.settle()) << "decided on the read queued before the release";
  EXPECT_FALSE(book.sync.settle()) << "passed on, and waits until its write is seen";
  EXPECT_EQ(serving(), 2u);
  EXPECT_TRUE(book.sync.settle());
  EXPECT_EQ(serving(), 2u);
  EXPECT_FALSE(book.sync.has_pending());
}

TEST_F(BooksWithAStreamLock, ADeadClientsEntryStaysTakenUntilItsTurnIsSeenPassed) {
  book.remove_client(dying);
  // Ticket 1 + 512 cannot be taken while ticket 1 waits: no turn still to come is a queue's
  // length ahead of the word, however many clients die.
  EXPECT_EQ(entry(1).state, sync::queue_entry::abandoned);
  EXPECT_EQ(entry(1).ticket, 1u);

  // A client given the dead one's slot queues behind it and dies too: the first turn is not
  // counted or given again.
  const client_id next = book.add_client({202, 1000, 1000, {}});
  const std::uint16_t slot = book.sync.attach(next).slot;
  ASSERT_EQ(entry(1).slot, slot);
  proto::sync_open_request request{};
  ASSERT_FALSE(proto::make_wire_name("streamed", request.name));
  request.kind = proto::sync_kind::lock;
  book.sync.open(next, request);
  ASSERT_EQ(sync::host_lock(*cell, slot).try_take_stream_ticket(), 2);
  book.remove_client(next);
  EXPECT_EQ(cell->owner_deaths, 2u);
  EXPECT_EQ(book.sync.page_by_id(opened.page)->signal_page_on(0)->waiting_turn_count(), 2u);

  serving() = 1;
  EXPECT_FALSE(book.sync.settle());  // on the read queued before the release
  EXPECT_FALSE(book.sync.settle());
  EXPECT_EQ(serving(), 2u);
  EXPECT_EQ(entry(1).state, sync::queue_entry::abandoned) << "freed before its pass landed";
  EXPECT_FALSE(book.sync.settle());
  EXPECT_EQ(entry(1).state, sync::queue_entry::empty);
  EXPECT_EQ(serving(), 3u);
  EXPECT_TRUE(book.sync.settle());
  EXPECT_EQ(entry(2).state, sync::queue_entry::empty);
}

TEST_F(BooksWithAStreamLock, ARestartThatFindsTheCellCorruptMarksItAndGivesNoTurn) {
  book.remove_client(dying);
  signal_page& signals = *book.sync.page_by_id(opened.page)->signal_page_on(0);
  signals.clear(index);  // as a restarted daemon's page
  cell->queue[5] = 1;    // bits but no state
  book.sync.resume_dead_turns();
  const object_id lock = book.sync.page_by_id(opened.page)->object_in(index);
  EXPECT_TRUE(book.sync.cell_of(lock)->corrupt);
  EXPECT_EQ(signals.waiting_turn_count(), 0u) << "a corrupt cell's entries were trusted";
}

TEST_F(BooksWithAStreamLock, ALockFoundCorruptAfterADeathStillFreesThePassedTurnsEntry) {
  book.remove_client(dying);
  cell->queue[5] = 1;
  book.remove_client(holder);  // its clean-up finds the cell corrupt
  const object_id lock = book.sync.page_by_id(opened.page)->object_in(index);
  ASSERT_TRUE(book.sync.cell_of(lock)->corrupt);
  // Live clients that still queue there need the entry.
  serving() = 1;
  EXPECT_FALSE(book.sync.settle());
  EXPECT_FALSE(book.sync.settle());
  EXPECT_TRUE(book.sync.settle());
  EXPECT_EQ(entry(1).state, sync::queue_entry::empty);
}

TEST_F(BooksWithAStreamLock, ARestartedDaemonFindsADeadClientsTurnByItsAbandonedEntry) {
  book.remove_client(dying);
  signal_page& signals = *book.sync.page_by_id(opened.page)->signal_page_on(0);
  // A signal page that does not know of the turn, as a restarted daemon's does not. (Clearing
  // the cell zeroes its words, which the lock has not moved yet.)
  signals.clear(index);
  ASSERT_EQ(signals.waiting_turn_count(), 0u);
  book.sync.resume_dead_turns();
  EXPECT_EQ(signals.waiting_turn_count(), 1u);
  EXPECT_FALSE(book.sync.settle());
  EXPECT_EQ(serving(), 0u) << "a turn that has not come was passed on";
  serving() = 1;
  EXPECT_FALSE(book.sync.settle());
  EXPECT_FALSE(book.sync.settle());
  EXPECT_EQ(serving(), 2u);
  EXPECT_TRUE(book.sync.settle());
  EXPECT_EQ(entry(1).state, sync::queue_entry::empty);

  // The lock page's record no longer holds turns; one from a daemon that wrote them reads.
  const restart::record_key key{restart::record_type::page, opened.page};
  restart::record_writer body;
  ASSERT_TRUE(restart::encode(book, key, body));
  // A count of one, then the turn: device, lock (64 bits), epoch, cell, offset, turn, next.
  const std::array<std::uint32_t, 9> old_turns{1, 0, 7, 0, 1, index, 0, 1, 2};
  body.append(std::as_bytes(std::span(old_turns)));
  const restart::state_image image = restart::decode({{key, std::move(body).take()}});
  EXPECT_EQ(image.pages.at(opened.page).signal_devices, std::vector<std::int32_t>{0});
}

}  // namespace
}  // namespace gpumem::daemon
