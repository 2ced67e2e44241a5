// The lock and counter algorithms on a cell in this process, threads standing in for clients
// (each thread its own slot): what the daemon-free paths guarantee, under TSan too.
#include "gpumem/shared/sync/host_lock.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/lock_fast_path.hpp"
#include "gpumem/shared/sync/host_counters.hpp"
#include "support/eventually.hpp"
#include "support/full_lock_queue.hpp"
#include "support/refused_syscall.hpp"
#include "support/sanitizer.hpp"
#include "support/thread_state.hpp"

namespace gpumem::sync {
namespace {

using namespace std::chrono_literals;
using gpumem::testing::eventually;
using gpumem::testing::held_lock_with_full_queue;
using gpumem::testing::thread_state;

std::unique_ptr<lock_cell> fresh_lock() {
  return std::make_unique<lock_cell>();
}

/// The daemon's side of a cell at epoch 0 whose clients have @p attached slots.
struct daemon_side {
  explicit daemon_side(std::initializer_list<std::uint16_t> attached) {
    for (const std::uint16_t slot : attached) slots.set(slot);
  }
  lock_facts facts(std::uint16_t epoch = 0) const { return {epoch, slots}; }
  slot_set slots;
};

lock_word word_of(const lock_cell& cell) {
  return lock_word::decode(
      std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(cell.word)).load());
}

/// How often the calling thread went to sleep (voluntary context switches) while @p wait ran.
template <typename Wait>
long sleeps_during(const Wait& wait) {
  rusage before{};
  rusage after{};
  ::getrusage(RUSAGE_THREAD, &before);
  wait();
  ::getrusage(RUSAGE_THREAD, &after);
  return after.ru_nvcsw - before.ru_nvcsw;
}

TEST(HostLock, ThreadsCountExactly) {
  auto cell = fresh_lock();
  constexpr int kThreads = 4;
  constexpr int kIterations = 5000;
  std::uint64_t counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, slot = static_cast<std::uint16_t>(t + 1)] {
      host_lock lock(*cell, slot);
      for (int i = 0; i < kIterations; ++i) {
        const auto held = lock.acquire();
        ASSERT_EQ(held.status, acquire_status::acquired);
        ++counter;
        ASSERT_EQ(lock.release(held.hold), release_status::released);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter, std::uint64_t{kThreads} * kIterations);
  EXPECT_TRUE(word_of(*cell).free());
  for (const auto entry : cell->queue) EXPECT_EQ(entry, 0u) << "a queue entry was left behind";
}

TEST(HostLock, WaitersAreServedInTheOrderTheyQueued) {
  // FIFO: the holders' tickets, in the order they held the lock, never skip one and never go
  // back. A hold taken alone takes no ticket, so the next holder has the same one; any other
  // hold is followed by the next ticket. So a waiter is overtaken by nobody who queued after
  // it: no starvation.
  auto cell = fresh_lock();
  constexpr int kThreads = 4;
  constexpr int kIterations = 2000;
  struct hold_seen {
    std::uint16_t ticket;
    bool alone;
  };
  std::vector<hold_seen> served;
  served.reserve(kThreads * kIterations);
  std::atomic<int> started = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, slot = static_cast<std::uint16_t>(t + 1)] {
      host_lock lock(*cell, slot);
      ++started;
      while (started < kThreads) std::this_thread::yield();
      for (int i = 0; i < kIterations; ++i) {
        const auto held = lock.acquire();
        // Alone until its release finds a waiter: the word says which, while it is held.
        served.push_back({held.hold.ticket, word_of(*cell).held_alone()});
        if (i % 8 == 0) std::this_thread::yield();  // let the others queue, even on one core
        lock.release(held.hold);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_EQ(served.size(), std::size_t{kThreads} * kIterations);
  std::size_t queued = 0;
  for (std::size_t i = 1; i < served.size(); ++i) {
    const auto step = static_cast<std::uint16_t>(served[i].ticket - served[i - 1].ticket);
    if (!served[i].alone) ++queued;
    // Seen alone, a waiter may still have come before its release: then the next ticket.
    if (served[i - 1].alone) {
      ASSERT_LE(step, 1) << "at hold " << i;
    } else {
      ASSERT_EQ(step, 1) << "at hold " << i;
    }
  }
  EXPECT_GT(queued, 0u) << "four threads never queued: the test saw no contention";
}

TEST(HostLock, AWaiterThatSleptAndWasSoonServedSpinsLongerNextTime) {
  // Two processes taking turns must not settle into sleeping on every hand-off: a wait that
  // went to sleep and still ended within the budget's most (250 us) raises how long the next
  // one spins before it sleeps.
  auto cell = fresh_lock();
  host_lock holder(*cell, 1);
  host_lock waiter(*cell, 2);
  EXPECT_EQ(waiter.spin_before_sleep(), 20us);
  // On a loaded machine (sanitizers, CI) a wake-up can outlast the most, which teaches the
  // opposite: tries for up to 10 s, each released as soon as the waiter is seen asleep (under
  // TSan with both cores of CI's machine busy, 50 tries once all woke too late).
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < give_up && waiter.spin_before_sleep() <= 20us) {
    const auto held = holder.acquire();
    ASSERT_EQ(held.status, acquire_status::acquired);
    std::atomic<pid_t> waiting_thread{0};
    std::thread waiting([&] {
      waiting_thread = ::gettid();
      const auto got = waiter.acquire();
      EXPECT_EQ(got.status, acquire_status::acquired);
      EXPECT_EQ(waiter.release(got.hold), release_status::released);
    });
    while (waiting_thread.load() == 0) std::this_thread::yield();
    // Asleep ('S'), or gone ('?': it never had to wait, which the next try repeats).
    for (char state = '?'; (state = thread_state(waiting_thread.load())) != 'S' && state != '?';) {
      std::this_thread::yield();
    }
    EXPECT_EQ(holder.release(held.hold), release_status::released);
    waiting.join();
  }
  EXPECT_GT(waiter.spin_before_sleep(), 20us);
}

TEST(HostLock, UncontendedPathsNeedNoQueue) {
  auto cell = fresh_lock();
  host_lock lock(*cell, 7);
  const auto held = lock.try_acquire();
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(word_of(*cell).owner, 7);
  EXPECT_FALSE(host_lock(*cell, 8).try_acquire().has_value());
  EXPECT_EQ(host_lock(*cell, 8).release(held->hold), release_status::not_owner);
  EXPECT_EQ(lock.release(held->hold), release_status::released);
  EXPECT_EQ(lock.release(held->hold), release_status::not_owner) << "released twice";
}

/// The client's inline fast path on @p cell for @p lock's process, guessing as the client does
/// after a slow acquire (client/src/lock.cpp).
struct fast_path_of {
  fast_path_of(lock_cell& cell, const host_lock& lock) { fast.bind(cell.word, lock.owner_bits()); }
  void took(const acquire_result& taken) {
    fast.guess(host_lock::free_word_after(taken).value_or(detail::lock_fast_path::kNoGuess));
  }
  detail::lock_fast_path fast;
};

TEST(HostLock, ALockTakenAloneComesBackToTheSameWordSoTheFastPathsStoreNothing) {
  auto cell = fresh_lock();
  host_lock mine(*cell, 7);
  host_lock theirs(*cell, 8);
  fast_path_of my(*cell, mine);
  fast_path_of their(*cell, theirs);
  const std::uint64_t free_word = cell->word;
  EXPECT_FALSE(my.fast.try_lock()) << "no guess before a slow acquire";
  EXPECT_EQ(cell->word, free_word);

  const auto taken = mine.try_acquire();
  ASSERT_TRUE(taken);
  EXPECT_TRUE(taken->alone);
  EXPECT_TRUE(word_of(*cell).held_alone());
  EXPECT_EQ(word_of(*cell).waiting(), 0);
  EXPECT_EQ(cell->word, free_word | mine.owner_bits()) << "alone, the hold only adds its owner";
  my.took(*taken);
  their.took(*taken);  // the other process guesses right too: it must still refuse
  EXPECT_FALSE(their.fast.try_lock());
  EXPECT_FALSE(their.fast.try_unlock()) << "only the holder's process releases";
  EXPECT_EQ(word_of(*cell).owner, 7);

  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(my.fast.try_unlock());
    EXPECT_EQ(cell->word, free_word) << "released alone, the word is as it was";
    EXPECT_FALSE(my.fast.try_unlock()) << "released twice";
    ASSERT_TRUE(my.fast.try_lock());
    EXPECT_EQ(word_of(*cell).owner, 7);
  }
  // The hold the fast path took is the one the slow acquire returned: the slow release takes it.
  EXPECT_EQ(mine.release(taken->hold), release_status::released);
  EXPECT_EQ(cell->word, free_word);
  ASSERT_TRUE(their.fast.try_lock()) << "any process that guessed the free word takes it";
  EXPECT_FALSE(my.fast.try_lock());
  EXPECT_TRUE(their.fast.try_unlock());
}

TEST(HostLock, AWaiterBehindAHoldTakenAloneQueuesAndTheFastReleaseStepsAside) {
  auto cell = fresh_lock();
  host_lock mine(*cell, 7);
  fast_path_of my(*cell, mine);
  const auto taken = mine.try_acquire();
  ASSERT_TRUE(taken && taken->alone);
  my.took(*taken);
  const std::uint16_t ticket = taken->hold.ticket;

  std::atomic<bool> served = false;
  acquire_result theirs_taken;
  std::thread waiter([&] {
    host_lock theirs(*cell, 8);
    theirs_taken = theirs.acquire();
    served = true;
  });
  // The waiter takes the holder's ticket and its own: the holder's hold is unchanged.
  while (word_of(*cell).queued() < 2) std::this_thread::yield();
  const lock_word queued = word_of(*cell);
  EXPECT_EQ(queued.serving, ticket);
  EXPECT_EQ(queued.next, static_cast<std::uint16_t>(ticket + 2));
  EXPECT_EQ(queued.owner, 7);
  EXPECT_EQ(queued.waiting(), 1) << "what gpumemctl shows as queued";
  const std::uint64_t before = cell->word;
  EXPECT_FALSE(my.fast.try_unlock()) << "a waiter queued: releasing alone would strand it";
  EXPECT_EQ(cell->word, before);
  EXPECT_FALSE(served);

  EXPECT_EQ(mine.release(taken->hold), release_status::released);
  waiter.join();
  ASSERT_EQ(theirs_taken.status, acquire_status::acquired);
  EXPECT_EQ(theirs_taken.hold.ticket, static_cast<std::uint16_t>(ticket + 1));
  EXPECT_FALSE(theirs_taken.alone);
  EXPECT_EQ(host_lock(*cell, 8).release(theirs_taken.hold), release_status::released);
  EXPECT_TRUE(word_of(*cell).free());
  EXPECT_EQ(word_of(*cell).serving, static_cast<std::uint16_t>(ticket + 2));
  EXPECT_FALSE(my.fast.try_lock()) << "the guess is stale once tickets moved";
  const auto again = mine.try_acquire();
  ASSERT_TRUE(again && again->alone);
  EXPECT_EQ(again->hold.ticket, static_cast<std::uint16_t>(ticket + 2));
  for (const auto entry : cell->queue) EXPECT_EQ(entry, 0u) << "a queue entry was left behind";
}

TEST(HostLock, AnAcquireAtAFullQueueNapsToItsDeadlineOrUntilTheReleaseClearsIt) {
  // A waiter that times out leaves its place given up until the holder's release clears it,
  // however long the holder holds. Nothing wakes a waiter that then finds no place: it looks
  // again after naps, which must neither turn into a spin nor outlast its deadline.
  held_lock_with_full_queue lock;
  acquire_result timed{};
  const auto started = host_lock::clock::now();
  const long sleeps =
      sleeps_during([&] { timed = host_lock(*lock.cell, 2).acquire(started + 300ms); });
  EXPECT_EQ(timed.status, acquire_status::timeout);
  EXPECT_LT(host_lock::clock::now() - started, 1s) << "it waited past its deadline";
  EXPECT_LE(sleeps, 400) << "a waiter at a full queue spun (50 us sleeps: about 1,500)";

  acquire_result untimed{};
  std::thread waiter([&] { untimed = host_lock(*lock.cell, 3).acquire(); });
  std::this_thread::sleep_for(100ms);
  const auto released_at = host_lock::clock::now();
  ASSERT_EQ(lock.release(), release_status::released);
  waiter.join();
  EXPECT_EQ(untimed.status, acquire_status::acquired) << "the release cleared the places";
  EXPECT_LT(host_lock::clock::now() - released_at, 1s);
  EXPECT_EQ(host_lock(*lock.cell, 3).release(untimed.hold), release_status::released);
}

TEST(HostLock, ReclaimHandsADeadHoldersLockToTheNextWaiter) {
  auto cell = fresh_lock();
  host_lock dead(*cell, 3);
  ASSERT_TRUE(dead.try_acquire().has_value());
  acquire_result got{};
  std::thread waiter([&] { got = host_lock(*cell, 4).acquire(); });
  while (word_of(*cell).queued() < 2) std::this_thread::yield();
  EXPECT_EQ(reclaim_lock(*cell, 3, daemon_side({3, 4}).facts()).status, repair_status::done);
  waiter.join();
  EXPECT_EQ(got.status, acquire_status::acquired_owner_died);
  EXPECT_EQ(cell->owner_deaths, 1u);
  host_lock next(*cell, 4);
  EXPECT_TRUE(next.mark_consistent(got.hold));
  EXPECT_EQ(next.release(got.hold), release_status::released);
  EXPECT_EQ(host_lock(*cell, 5).acquire().status, acquire_status::acquired);
}

TEST(HostLock, ReclaimSkipsADeadWaiter) {
  auto cell = fresh_lock();
  host_lock holder(*cell, 1);
  const auto held = holder.try_acquire();
  ASSERT_TRUE(held.has_value());
  // What a process that died queued leaves behind: its entry, and the tickets taken (the
  // holder's, which a lock held alone had not taken, and its own).
  lock_word taken = word_of(*cell);
  const std::uint16_t dead_ticket = taken.ticket_to_take();
  cell->queue[dead_ticket % kLockQueueLength] =
      queue_entry{dead_ticket, 2, false, queue_entry::waiting}.encode();
  taken.next = static_cast<std::uint16_t>(dead_ticket + 1);
  cell->word = taken.encode();
  acquire_result behind{};
  std::thread next([&] { behind = host_lock(*cell, 3).acquire(); });
  while (word_of(*cell).queued() < 3) std::this_thread::yield();
  EXPECT_EQ(reclaim_lock(*cell, 2, daemon_side({1, 2, 3}).facts()).status, repair_status::done);
  EXPECT_EQ(holder.release(held->hold), release_status::released);
  next.join();
  EXPECT_EQ(behind.status, acquire_status::acquired);
  EXPECT_EQ(word_of(*cell).owner, 3);
  EXPECT_EQ(host_lock(*cell, 3).release(behind.hold), release_status::released);
  for (const auto entry : cell->queue) EXPECT_EQ(entry, 0u) << "the dead waiter's entry stayed";
}

TEST(HostLock, ReclaimClearsAnEntryThatADeadWaiterClaimedBeforeItTookItsTickets) {
  // A waiter claims the entry of the ticket after the holder's, then converts the word held
  // alone; dead in between, it left an entry for a ticket nobody took.
  auto cell = fresh_lock();
  host_lock holder(*cell, 1);
  const auto held = holder.try_acquire();
  ASSERT_TRUE(held && held->alone);
  const std::uint64_t alone = cell->word;
  const std::uint16_t claimed = word_of(*cell).ticket_to_take();
  cell->queue[claimed % kLockQueueLength] =
      queue_entry{claimed, 2, false, queue_entry::waiting}.encode();
  EXPECT_EQ(reclaim_lock(*cell, 2, daemon_side({1, 2}).facts()).status, repair_status::done);
  EXPECT_EQ(cell->queue[claimed % kLockQueueLength], 0u) << "cleared, not left abandoned";
  EXPECT_EQ(cell->word, alone) << "the holder keeps its hold alone";
  EXPECT_EQ(holder.release(held->hold), release_status::released);
  EXPECT_TRUE(word_of(*cell).free());
  EXPECT_EQ(word_of(*cell).serving, held->hold.ticket);
}

TEST(HostLock, NotRecoverableUntilReset) {
  auto cell = fresh_lock();
  ASSERT_TRUE(host_lock(*cell, 1).try_acquire().has_value());
  const daemon_side daemon({1, 2});
  EXPECT_EQ(reclaim_lock(*cell, 1, daemon.facts()).status, repair_status::done);
  host_lock heir(*cell, 2);
  const auto got = heir.acquire();
  ASSERT_EQ(got.status, acquire_status::acquired_owner_died);
  EXPECT_EQ(heir.release(got.hold), release_status::released);  // without repair
  EXPECT_EQ(heir.acquire().status, acquire_status::not_recoverable);
  EXPECT_EQ(reset_lock(*cell, daemon.facts()), nullptr);
  EXPECT_EQ(word_of(*cell).epoch, 1u);
  const auto after = heir.acquire();
  EXPECT_EQ(after.status, acquire_status::acquired);
  EXPECT_EQ(heir.release(after.hold), release_status::released);
}

/// Fails the test run (SIGALRM) instead of letting a daemon-side loop that regressed into a
/// wait hang ctest.
class watchdog {
 public:
  explicit watchdog(unsigned seconds) { ::alarm(seconds); }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() { ::alarm(0); }
};

/// The attack of issue 11: a word naming a live slot as holder, a ticket queued behind it,
/// and no queue entry for that ticket. host_lock::release waits for the entry forever.
void write_hang_attack(lock_cell& cell, std::uint16_t slot) {
  lock_word word;
  word.owner = slot;
  word.serving = 7;
  word.next = 9;
  cell.word = word.encode();
}

TEST(HostLockDaemonSide, TheHangAttackIsReportedNotSpunOn) {
  const watchdog limit(10);
  auto cell = fresh_lock();
  write_hang_attack(*cell, 5);
  const daemon_side daemon({5});
  const auto started = std::chrono::steady_clock::now();
  const lock_repair reclaimed = reclaim_lock(*cell, 5, daemon.facts());
  EXPECT_EQ(reclaimed.status, repair_status::corrupt);
  EXPECT_STREQ(reclaimed.broken_rule, "a queued ticket has no queue entry");

  write_hang_attack(*cell, 5);
  EXPECT_STREQ(reset_lock(*cell, daemon.facts()), "a queued ticket has no queue entry");
  EXPECT_LT(std::chrono::steady_clock::now() - started, 100ms);
  EXPECT_EQ(check_lock_cell(*cell, daemon.facts(1)), nullptr) << "rewritten at the next epoch";
  host_lock user(*cell, 5);
  const auto held = user.try_acquire();
  ASSERT_TRUE(held);
  EXPECT_EQ(user.release(held->hold), release_status::released);
}

TEST(HostLockDaemonSide, WordsThatNoLockWritesAreNamed) {
  const daemon_side daemon({1, 2});
  auto cell = fresh_lock();
  EXPECT_EQ(check_lock_cell(*cell, daemon.facts()), nullptr);
  EXPECT_STREQ(check_lock_cell(*cell, daemon.facts(3)),
               "the lock word's epoch is not the daemon's");

  lock_word stranger;
  stranger.owner = 9;
  stranger.next = 1;
  cell->word = stranger.encode();
  EXPECT_STREQ(check_lock_cell(*cell, daemon.facts()), "the holder's slot belongs to no client");

  lock_word alone;
  alone.owner = 2;
  cell->word = alone.encode();
  EXPECT_EQ(check_lock_cell(*cell, daemon.facts()), nullptr) << "held alone: an owner, no ticket";

  lock_word orphaned;
  orphaned.next = 2;
  cell->word = orphaned.encode();
  EXPECT_STREQ(check_lock_cell(*cell, daemon.facts()),
               "tickets are taken but the lock word names no holder");

  lock_word flooded;
  flooded.owner = 1;
  flooded.next = kLockQueueLength + 2;
  cell->word = flooded.encode();
  EXPECT_STREQ(check_lock_cell(*cell, daemon.facts()),
               "more tickets are taken than the queue holds");

  cell->word = 0;
  cell->queue[3] = queue_entry{4, 1, false, queue_entry::waiting}.encode();
  EXPECT_STREQ(check_lock_cell(*cell, daemon.facts()),
               "a queue entry sits at another ticket's place");
  cell->queue[3] = 0;
  cell->domain = 0x0107;
  EXPECT_STREQ(check_lock_cell(*cell, daemon.facts()), "the domain word names no domain");
}

/// A lock cell of random words, half of them shaped like real ones so that the daemon's
/// loops get past the first checks.
void randomise(lock_cell& cell, std::mt19937_64& random) {
  const bool shaped = (random() & 1) != 0;
  cell.domain =
      shaped ? static_cast<std::uint32_t>(random() % 2) : static_cast<std::uint32_t>(random());
  cell.owner_deaths = static_cast<std::uint32_t>(random());
  if (!shaped) {
    cell.word = random();
    for (auto& entry : cell.queue)
      entry = (random() & 3) == 0 ? static_cast<std::uint32_t>(random()) : 0;
    return;
  }
  lock_word word;
  word.serving = static_cast<std::uint16_t>(random());
  word.next = static_cast<std::uint16_t>(word.serving + random() % (kLockQueueLength + 4));
  // Free, held alone or held in the queue.
  const bool no_ticket = word.next == word.serving;
  word.owner = no_ticket && (random() & 1) != 0 ? 0 : static_cast<std::uint16_t>(1 + random() % 8);
  word.flags = static_cast<std::uint8_t>(random() % 4);
  cell.word = word.encode();
  for (std::uint32_t index = 0; index < kLockQueueLength; ++index) {
    const auto ticket = static_cast<std::uint16_t>(index + kLockQueueLength * (random() % 128));
    const auto state = static_cast<queue_entry::state_type>(random() % 4);
    cell.queue[index] =
        (random() % 3) == 0
            ? 0
            : queue_entry{ticket, static_cast<std::uint16_t>(1 + random() % 8), false, state}
                  .encode();
  }
}

TEST(HostLockDaemonSide, TenThousandRandomCellsAreRepairedOrReportedPromptly) {
  const watchdog limit(60);
  const daemon_side daemon({1, 2, 3, 4, 5, 6, 7, 8});
  std::mt19937_64 random(11);
  auto cell = fresh_lock();
  unsigned corrupt = 0;
  for (int round = 0; round < 10000; ++round) {
    randomise(*cell, random);
    const auto dead = static_cast<std::uint16_t>(1 + random() % 8);
    if (reclaim_lock(*cell, dead, daemon.facts()).status == repair_status::corrupt) ++corrupt;
    reset_lock(*cell, daemon.facts());
    ASSERT_EQ(check_lock_cell(*cell, daemon.facts(1)), nullptr)
        << "a reset leaves a consistent lock, round " << round;
  }
  EXPECT_GT(corrupt, 0u);
}

TEST(HostCounters, BreakWakesSleepersAndResetStartsOver) {
  auto cell = std::make_unique<counter_cell>();
  cell->parties = 2;
  host_counters counters(*cell);
  wait_status seen = wait_status::ok;
  std::thread sleeper([&] { seen = counters.wait_for(1, 1); });
  std::this_thread::sleep_for(30ms);
  break_counters(*cell);
  sleeper.join();
  EXPECT_EQ(seen, wait_status::broken);
  reset_counters(*cell, 2, 1);
  EXPECT_FALSE(counters.broken());
  EXPECT_EQ(counters.count(1), 0u);
  EXPECT_EQ(counters.wait_for(1, 1, host_counters::clock::now() + 10ms), wait_status::timeout);
  counters.publish(1, 1);
  EXPECT_EQ(counters.wait_for(1, 1), wait_status::ok);
}

#ifndef SYS_futex_waitv
#define SYS_futex_waitv \
  449  // Linux 5.16, one number on every architecture; older C headers lack it
#endif

/// Whether this kernel and this process's seccomp filter let futex_waitv run (Linux 5.16).
bool futex_waitv_allowed() {
  // Asked with no words, a kernel that has the call answers EINVAL.
  return ::syscall(SYS_futex_waitv, nullptr, 0u, 0u, nullptr, CLOCK_MONOTONIC) == -1 &&
         errno == EINVAL;
}

TEST(HostCounters, ASleepingWaitWakesForNothingButWhatEndsIt) {
  // A waiter sleeps on its word, the broken flag and the epoch at once (futex_waitv), so a
  // break or a reset cannot slip in between its checks and its sleep, and it need not wake to
  // look: hundreds of processes waiting at barriers cost nothing while they wait.
  if (!futex_waitv_allowed()) {
    GTEST_SKIP() << "futex_waitv is refused here (Linux before 5.16, or a seccomp filter): "
                    "waits sleep 10 ms at a time; the next test covers that";
  }
  auto cell = std::make_unique<counter_cell>();
  cell->parties = 2;
  host_counters counters(*cell);
  wait_status seen = wait_status::ok;
  const long sleeps =
      sleeps_during([&] { seen = counters.wait_for(1, 1, host_counters::clock::now() + 500ms); });
  EXPECT_EQ(seen, wait_status::timeout);
  EXPECT_LE(sleeps, 5) << "a wait that nothing ended woke up to look (10 ms naps: 50)";

  std::thread breaker([&] {
    std::this_thread::sleep_for(100ms);
    break_counters(*cell);
  });
  const auto started = host_counters::clock::now();
  EXPECT_EQ(counters.wait_for(1, 1, started + 10s), wait_status::broken);
  EXPECT_LT(host_counters::clock::now() - started, 5s);
  breaker.join();
}

TEST(HostCounters, ABreakWakesEverySleeperWhateverPartyCountTheCellClaims) {
  // The daemon breaks a cell whose words it found wrong, the party count among them: a client
  // that lowered it must not leave the parties beyond it asleep for ever.
  auto cell = std::make_unique<counter_cell>();
  cell->parties = 4;
  host_counters counters(*cell);
  wait_status seen = wait_status::ok;
  std::thread sleeper([&] { seen = counters.wait_for(3, 1, host_counters::clock::now() + 5s); });
  std::this_thread::sleep_for(50ms);
  cell->parties = 1;  // a client's write
  const auto broken_at = host_counters::clock::now();
  break_counters(*cell);
  sleeper.join();
  EXPECT_EQ(seen, wait_status::broken);
  EXPECT_LT(host_counters::clock::now() - broken_at, 1s);
}

TEST(HostCounters, WhereFutexWaitvIsRefusedWaitsSleepBrieflyAndStillEnd) {
  // In a container whose seccomp filter predates futex_waitv (ENOSYS or EPERM), or on an older
  // kernel, a waiter sleeps on its word alone, 10 ms at a time, re-checking the broken flag.
  for (const int error : {ENOSYS, EPERM}) {
    const auto run = gpumem::testing::run_where_syscall_fails(
        SYS_futex_waitv, error,
        [] {
          auto cell = std::make_unique<counter_cell>();
          cell->parties = 2;
          host_counters counters(*cell);
          wait_status timed = wait_status::ok;
          const long sleeps = sleeps_during(
              [&] { timed = counters.wait_for(1, 1, host_counters::clock::now() + 200ms); });
          wait_status untimed = wait_status::ok;
          std::thread sleeper([&] { untimed = counters.wait_for(1, 1); });
          std::this_thread::sleep_for(50ms);
          break_counters(*cell);
          sleeper.join();
          return !futex_waitv_allowed() && timed == wait_status::timeout && sleeps >= 5 &&
                 untimed == wait_status::broken;
        },
        20s);
    if (!run.filter_installed) GTEST_SKIP() << "this process may not install a seccomp filter";
    EXPECT_EQ(run.failure, "") << "futex_waitv failing with " << std::strerror(error);
  }
}

TEST(HostCounters, AWaitGetsWhatAPartyPublishedJustBeforeTheCellBroke) {
  // A producer that publishes its last item and exits is broken by the daemon moments later; a
  // consumer that read the count just before the publish and the broken flag just after the
  // break must still get the item. The window is a preemption between two loads, so this runs
  // many rounds, with more waiters than CI's machine has cores (on larger machines it catches
  // the race less often). Fewer under the sanitizers, whose thread starts cost ten times more:
  // ThreadSanitizer finds a data race in one round.
  constexpr int kRounds = gpumem::testing::kSanitized ? 600 : 3000;
  constexpr int kWaiters = 4;
  int lost = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto cell = std::make_unique<counter_cell>();
    cell->parties = 2;
    host_counters counters(*cell);
    std::atomic<int> waiting{0};
    std::atomic<int> broken_seen{0};
    std::vector<std::thread> waiters;
    for (int waiter = 0; waiter < kWaiters; ++waiter) {
      waiters.emplace_back([&] {
        waiting.fetch_add(1);
        if (counters.wait_for(0, 1) != wait_status::ok) broken_seen.fetch_add(1);
      });
    }
    while (waiting.load() < kWaiters) std::this_thread::yield();
    counters.publish(0, 1);
    break_counters(*cell);
    for (auto& waiter : waiters) waiter.join();
    lost += broken_seen.load();
  }
  EXPECT_EQ(lost, 0) << "waits told 'broken' for a count published before the break";
}

TEST(HostCounters, ComparisonIsCyclic) {
  EXPECT_TRUE(reached(5, 5));
  EXPECT_FALSE(reached(4, 5));
  EXPECT_TRUE(reached(2, 0xfffffffeu)) << "a counter that wrapped is ahead";
  EXPECT_TRUE(reached(7 + kBrokenLead, 1000)) << "a dead party's GPU counter satisfies any wait";
}

TEST(HostCountersDaemonSide, CountsThatNoPartyWritesAreNamed) {
  auto cell = std::make_unique<counter_cell>();
  cell->domain = domain_word(domain::host);
  cell->parties = 3;
  const counter_facts barrier{3, 0, false};
  host_counters counters(*cell);
  counters.arrive(0, 1);
  counters.arrive(1, 1);
  EXPECT_EQ(check_counter_cell(*cell, barrier), nullptr);
  cell->counts[2] = 1;  // stored, not yet counted: an arrival in between
  EXPECT_EQ(check_counter_cell(*cell, barrier), nullptr);
  cell->counts[2] = 1000;
  EXPECT_STREQ(check_counter_cell(*cell, barrier), "the arrivals do not add up to the rounds");
  cell->counts[2] = 0;
  EXPECT_STREQ(check_counter_cell(*cell, {4, 0, false}), "the party count is not the daemon's");
  EXPECT_STREQ(check_counter_cell(*cell, {3, 1, false}), "the epoch is not the daemon's");

  const counter_facts channel{3, 0, true};
  reset_counters(*cell, 3, 0);
  counters.publish(0, 5);
  counters.publish(2, 5);
  EXPECT_EQ(check_counter_cell(*cell, channel), nullptr);
  counters.publish(1, 6);
  EXPECT_STREQ(check_counter_cell(*cell, channel),
               "a consumer released items the producer never published");
  cell->state = 0x10;
  EXPECT_STREQ(check_counter_cell(*cell, channel), "the state word has bits nobody sets");
}

TEST(HostCountersDaemonSide, RandomCellsAreCheckedBrokenAndResetPromptly) {
  const watchdog limit(60);
  std::mt19937_64 random(12);
  auto cell = std::make_unique<counter_cell>();
  for (int round = 0; round < 10000; ++round) {
    auto* words = reinterpret_cast<std::uint32_t*>(cell.get());
    for (std::size_t word = 0; word < sizeof(counter_cell) / sizeof(std::uint32_t); ++word) {
      words[word] = static_cast<std::uint32_t>(random());
    }
    const counter_facts facts{static_cast<std::uint32_t>(1 + random() % kMaxParties),
                              static_cast<std::uint32_t>(round), (random() & 1) != 0};
    (void)check_counter_cell(*cell, facts);
    break_counters(*cell);
    reset_counters(*cell, facts.parties, facts.epoch + 1);
    cell->domain = domain_word(domain::host);
    ASSERT_EQ(check_counter_cell(*cell, {facts.parties, facts.epoch + 1, facts.channel}), nullptr)
        << "a reset leaves consistent counters, round " << round;
  }
}

}  // namespace
}  // namespace gpumem::sync
