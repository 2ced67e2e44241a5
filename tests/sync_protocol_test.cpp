// What the daemon does to a lock, barrier or channel after a death or a reset, in every domain
// (gpumem/shared/sync/lock.hpp, counters.hpp), with the signal page's words kept in host memory.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "gpumem/shared/sync/counters.hpp"
#include "gpumem/shared/sync/lock.hpp"

namespace gpumem::sync {
namespace {

/// A signal page in host memory. A stream-ordered turn hand-off is recorded and carried out at
/// once when its turn has come, as a stream would once the word reached it.
class host_signal_words final : public signal_words {
 public:
  std::uint32_t read(std::uint32_t cell, std::size_t offset) override {
    return *word(cell, offset);
  }
  void write(std::uint32_t cell, std::size_t offset, std::uint32_t value) override {
    *word(cell, offset) = value;
  }
  void pass_turn(std::uint32_t cell, std::uint32_t turn, std::uint32_t next_turn) override {
    if (passed.size() == refuse_after) throw std::bad_alloc();
    passed.push_back(turn);
    if (at(cell).serving == turn) at(cell).serving = next_turn;
  }
  void clear(std::uint32_t cell) override { cells.at(cell) = {}; }

  signal_cell& at(std::uint32_t cell) { return cells.at(cell); }
  std::vector<std::uint32_t> passed;
  std::size_t refuse_after = SIZE_MAX;  ///< turns taken before pass_turn() throws

 private:
  std::uint32_t* word(std::uint32_t cell, std::size_t offset) {
    return reinterpret_cast<std::uint32_t*>(reinterpret_cast<std::byte*>(&cells.at(cell)) + offset);
  }
  std::array<signal_cell, 4> cells{};
};

constexpr std::uint32_t kIndex = 2;
constexpr std::uint16_t kDead = 7;
constexpr std::uint16_t kAlive = 8;

/// The daemon's side of a cell at epoch 0 with both clients attached.
struct daemon_side {
  daemon_side() {
    slots.set(kDead);
    slots.set(kAlive);
  }
  lock_facts facts() const { return {0, slots}; }
  slot_set slots;
};

TEST(LockProtocol, AStreamReleaseWritesTheTurnBeforeClearingItsEntry) {
  const auto writes = stream_release_writes(41);
  EXPECT_EQ(writes[0].word, stream_write::word_type::serving);
  EXPECT_EQ(writes[0].value, 42u);
  EXPECT_EQ(writes[1].word, stream_write::word_type::queue_entry);
  EXPECT_EQ(writes[1].value, 0u);
  EXPECT_EQ(stream_release_writes(0xffff)[0].value, 0u) << "tickets wrap at 16 bits";
}

/// A stream-ordered lock whose next ticket is @p next: the tickets taken from there on sit
/// at the end of the queue and then, wrapping, at its start.
std::unique_ptr<lock_cell> stream_lock_at(std::uint16_t next) {
  auto cell = std::make_unique<lock_cell>();
  cell->domain = domain_word(domain::stream, 0);
  lock_word word;
  word.serving = next;
  word.next = next;
  cell->word = word.encode();
  return cell;
}

// Tickets on both sides of the 16-bit wrap, which is also the queue's: oldest first is not
// the order of their queue entries, nor of their numbers.
constexpr std::uint16_t kLast = 0xffff;
constexpr std::uint16_t kFirst = 0;
constexpr std::uint16_t kSecond = 1;

/// A stream-ordered lock in which the dead client took kLast and kSecond, around the living
/// one's kFirst; nobody was served yet.
std::unique_ptr<lock_cell> dead_around_living() {
  auto cell = stream_lock_at(kLast);
  host_lock dead(*cell, kDead);
  host_lock alive(*cell, kAlive);
  EXPECT_EQ(dead.try_take_stream_ticket(), kLast);
  EXPECT_EQ(alive.try_take_stream_ticket(), kFirst);
  EXPECT_EQ(dead.try_take_stream_ticket(), kSecond);
  return cell;
}

TEST(LockProtocol, ADeadStreamHoldersTurnsArePassedOnOldestFirst) {
  auto cell = dead_around_living();
  host_signal_words page;
  page.at(kIndex).serving = kLast;

  const reclaim_result result = reclaim(*cell, &page, kIndex, kDead, daemon_side().facts());
  EXPECT_EQ(result.repair.status, repair_status::done);
  EXPECT_EQ(result.turns_passed, 2u);
  EXPECT_EQ(page.passed, (std::vector<std::uint32_t>{kLast, kSecond}));
  EXPECT_EQ(page.at(kIndex).serving, kFirst) << "the living holder's turn came";
  EXPECT_EQ(cell->owner_deaths, 2u);
  // Their entries stay taken, abandoned, until the daemon has seen each turn passed.
  const auto entry = [&](std::uint16_t ticket) {
    return queue_entry::decode(cell->queue[ticket % kLockQueueLength]);
  };
  EXPECT_EQ(entry(kLast).state, queue_entry::abandoned);
  EXPECT_EQ(entry(kSecond).state, queue_entry::abandoned);
  EXPECT_EQ(entry(kFirst).state, queue_entry::waiting);
  free_passed_turn(*cell, kFirst);
  free_passed_turn(*cell, kSecond + kLockQueueLength);
  EXPECT_EQ(entry(kFirst).state, queue_entry::waiting) << "a living holder's entry was freed";
  EXPECT_EQ(entry(kSecond).state, queue_entry::abandoned) << "another ticket's entry was freed";
  free_passed_turn(*cell, kLast);
  free_passed_turn(*cell, kSecond);
  EXPECT_EQ(entry(kLast).state, queue_entry::empty);
  EXPECT_EQ(entry(kSecond).state, queue_entry::empty);
}

TEST(LockProtocol, NoStreamTicketIsTakenAQueuesLengthPastADeadHoldersTurnUntilItIsPassed) {
  auto cell = stream_lock_at(0);
  host_signal_words page;
  host_lock dead(*cell, kDead);
  host_lock alive(*cell, kAlive);
  ASSERT_EQ(dead.try_take_stream_ticket(), 0);
  for (std::uint32_t ticket = 1; ticket < kLockQueueLength; ++ticket) {
    ASSERT_EQ(alive.try_take_stream_ticket(), ticket);
  }
  ASSERT_EQ(reclaim(*cell, &page, kIndex, kDead, daemon_side().facts()).turns_passed, 1u);
  const std::uint64_t word_before = cell->word;
  EXPECT_EQ(alive.try_take_stream_ticket(), std::nullopt)
      << "a ticket was taken a queue's length past a turn still to come";
  EXPECT_EQ(cell->word, word_before) << "a try that found the queue full took a ticket";
  const queue_entry dead_turn{0, kDead, true, queue_entry::abandoned};
  EXPECT_EQ(cell->queue[0], dead_turn.encode())
      << "a try that found the queue full changed the dead turn's entry";
  free_passed_turn(*cell, 0);
  EXPECT_EQ(alive.try_take_stream_ticket(), kLockQueueLength)
      << "the entry of the passed turn was not freed";
}

TEST(LockProtocol, ADeadStreamHoldersEntriesGoWhenNoPageTakesTheirTurns) {
  auto cell = stream_lock_at(0);
  host_lock dead(*cell, kDead);
  ASSERT_EQ(dead.try_take_stream_ticket(), 0);
  ASSERT_EQ(dead.try_take_stream_ticket(), 1);
  ASSERT_EQ(dead.try_take_stream_ticket(), 2);
  EXPECT_EQ(reclaim(*cell, nullptr, kIndex, kDead, daemon_side().facts()).turns_passed, 0u);
  EXPECT_EQ(cell->queue[0], 0u) << "abandoned with no page to pass its turn on";

  cell = stream_lock_at(0);
  host_lock again(*cell, kDead);
  for (int ticket = 0; ticket < 3; ++ticket) ASSERT_EQ(again.try_take_stream_ticket(), ticket);
  host_signal_words page;
  page.refuse_after = 1;  // the second turn cannot be taken
  EXPECT_THROW(reclaim(*cell, &page, kIndex, kDead, daemon_side().facts()), std::bad_alloc);
  EXPECT_EQ(queue_entry::decode(cell->queue[0]).state, queue_entry::abandoned)
      << "the turn the page took";
  EXPECT_EQ(cell->queue[1], 0u) << "a turn no page took is left waiting";
  EXPECT_EQ(cell->queue[2], 0u);
}

TEST(LockProtocol, ARestartedDaemonPassesOnTheTurnsWhoseEntriesAreAbandoned) {
  auto cell = dead_around_living();
  host_signal_words before;
  ASSERT_EQ(reclaim(*cell, &before, kIndex, kDead, daemon_side().facts()).turns_passed, 2u);

  // The new daemon's page knows nothing of them; the dead slot is free again.
  host_signal_words after;
  slot_set slots;
  slots.set(kAlive);
  const reclaim_result resumed = resume_stream_turns(*cell, after, kIndex, {0, slots});
  EXPECT_EQ(resumed.repair.status, repair_status::done);
  EXPECT_EQ(resumed.turns_passed, 2u);
  EXPECT_EQ(after.passed, (std::vector<std::uint32_t>{kLast, kSecond})) << "not oldest first";
  EXPECT_EQ(cell->owner_deaths, 2u) << "a death counted again";

  cell->queue[5] = 1;  // bits but no state: the cell is not trusted
  host_signal_words untrusted;
  EXPECT_EQ(resume_stream_turns(*cell, untrusted, kIndex, {0, slots}).repair.status,
            repair_status::corrupt);
  EXPECT_TRUE(untrusted.passed.empty());
}

TEST(LockProtocol, ADeadDeviceHolderIsReleasedWithOwnerDiedAndOthersAreLeftAlone) {
  auto cell = std::make_unique<lock_cell>();
  cell->domain = domain_word(domain::device, 0);
  host_signal_words page;
  page.at(kIndex).device_lock = kAlive;
  const daemon_side daemon;
  EXPECT_FALSE(reclaim(*cell, &page, kIndex, kDead, daemon.facts()).device_lock_released);
  EXPECT_EQ(page.at(kIndex).device_lock, kAlive);

  page.at(kIndex).device_lock = kDead;
  EXPECT_TRUE(reclaim(*cell, &page, kIndex, kDead, daemon.facts()).device_lock_released);
  EXPECT_EQ(page.at(kIndex).device_lock, 0u);
  EXPECT_EQ(page.at(kIndex).owner_died, 1u);
  EXPECT_EQ(cell->owner_deaths, 1u);

  const reset_result done = reset(*cell, &page, kIndex, daemon.facts());
  EXPECT_TRUE(done.supported);
  EXPECT_EQ(done.rewritten_because, nullptr);
  EXPECT_EQ(page.at(kIndex).owner_died, 0u);
}

TEST(LockProtocol, ADeadHostHolderHandsTheLockOnWithOwnerDied) {
  auto cell = std::make_unique<lock_cell>();
  cell->domain = domain_word(domain::host);
  ASSERT_TRUE(host_lock(*cell, kDead).try_acquire());
  EXPECT_EQ(reclaim(*cell, nullptr, kIndex, kDead, daemon_side().facts()).repair.status,
            repair_status::done);
  const auto next = host_lock(*cell, kAlive).try_acquire();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, acquire_status::acquired_owner_died);
}

TEST(LockProtocol, AStreamOrderedLockHasNothingToReset) {
  auto cell = std::make_unique<lock_cell>();
  cell->domain = domain_word(domain::stream, 0);
  host_signal_words page;
  EXPECT_FALSE(reset(*cell, &page, kIndex, daemon_side().facts()).supported);
}

TEST(CounterProtocol, ABrokenPartysCountJumpsAheadOnTheSignalPage) {
  auto cell = std::make_unique<counter_cell>();
  cell->parties = 3;
  host_signal_words page;
  page.at(kIndex).counts[1] = 5;
  break_party(*cell, &page, kIndex, 1);
  EXPECT_EQ(cell->state & counter_cell::kBroken, counter_cell::kBroken);
  EXPECT_EQ(page.at(kIndex).broken, 1u);
  EXPECT_EQ(page.at(kIndex).counts[1], 5u + kBrokenLead);
  EXPECT_EQ(page.at(kIndex).counts[0], 0u);

  reset(*cell, &page, kIndex, 2, 1);
  EXPECT_EQ(cell->state, 0u);
  EXPECT_EQ(cell->parties, 2u);
  EXPECT_EQ(cell->epoch, 1u);
  EXPECT_EQ(page.at(kIndex).broken, 0u);
  EXPECT_EQ(page.at(kIndex).counts[1], 0u);
}

}  // namespace
}  // namespace gpumem::sync
