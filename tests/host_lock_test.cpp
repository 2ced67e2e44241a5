// The lock and counter algorithms on a cell in this process, threads standing in for clients
// (each thread its own slot): what the daemon-free paths guarantee, under TSan too.
#include "gpumem/shared/sync/host_lock.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "gpumem/shared/sync/host_counters.hpp"

namespace gpumem::sync {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<lock_cell> fresh_lock() {
  return std::make_unique<lock_cell>();
}

lock_word word_of(const lock_cell& cell) {
  return lock_word::decode(
      std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(cell.word)).load());
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
  // FIFO: the holders' tickets, in the order they held the lock, count up by one. So a waiter
  // is overtaken by nobody who queued after it: no starvation.
  auto cell = fresh_lock();
  constexpr int kThreads = 4;
  constexpr int kIterations = 2000;
  std::vector<std::uint16_t> served;
  served.reserve(kThreads * kIterations);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, slot = static_cast<std::uint16_t>(t + 1)] {
      host_lock lock(*cell, slot);
      for (int i = 0; i < kIterations; ++i) {
        const auto held = lock.acquire();
        served.push_back(held.hold.ticket);
        lock.release(held.hold);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_EQ(served.size(), std::size_t{kThreads} * kIterations);
  for (std::size_t i = 1; i < served.size(); ++i) {
    ASSERT_EQ(served[i], static_cast<std::uint16_t>(served[i - 1] + 1)) << "at hold " << i;
  }
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

TEST(HostLock, ReclaimHandsADeadHoldersLockToTheNextWaiter) {
  auto cell = fresh_lock();
  host_lock dead(*cell, 3);
  ASSERT_TRUE(dead.try_acquire().has_value());
  acquire_result got{};
  std::thread waiter([&] { got = host_lock(*cell, 4).acquire(); });
  while (word_of(*cell).queued() < 2) std::this_thread::yield();
  EXPECT_TRUE(reclaim_lock(*cell, 3));
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
  // What a process that died queued leaves behind: its entry, and the ticket taken.
  lock_word taken = word_of(*cell);
  cell->queue[taken.next % kLockQueueLength] =
      queue_entry{taken.next, 2, false, queue_entry::waiting}.encode();
  ++taken.next;
  cell->word = taken.encode();
  acquire_result behind{};
  std::thread next([&] { behind = host_lock(*cell, 3).acquire(); });
  while (word_of(*cell).queued() < 3) std::this_thread::yield();
  EXPECT_TRUE(reclaim_lock(*cell, 2));
  EXPECT_EQ(holder.release(held->hold), release_status::released);
  next.join();
  EXPECT_EQ(behind.status, acquire_status::acquired);
  EXPECT_EQ(word_of(*cell).owner, 3);
  EXPECT_EQ(host_lock(*cell, 3).release(behind.hold), release_status::released);
  for (const auto entry : cell->queue) EXPECT_EQ(entry, 0u) << "the dead waiter's entry stayed";
}

TEST(HostLock, NotRecoverableUntilReset) {
  auto cell = fresh_lock();
  ASSERT_TRUE(host_lock(*cell, 1).try_acquire().has_value());
  EXPECT_TRUE(reclaim_lock(*cell, 1));
  host_lock heir(*cell, 2);
  const auto got = heir.acquire();
  ASSERT_EQ(got.status, acquire_status::acquired_owner_died);
  EXPECT_EQ(heir.release(got.hold), release_status::released);  // without repair
  EXPECT_EQ(heir.acquire().status, acquire_status::not_recoverable);
  reset_lock(*cell);
  const auto after = heir.acquire();
  EXPECT_EQ(after.status, acquire_status::acquired);
  EXPECT_EQ(heir.release(after.hold), release_status::released);
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
  reset_counters(*cell, 2);
  EXPECT_FALSE(counters.broken());
  EXPECT_EQ(counters.count(1), 0u);
  EXPECT_EQ(counters.wait_for(1, 1, host_counters::clock::now() + 10ms), wait_status::timeout);
  counters.publish(1, 1);
  EXPECT_EQ(counters.wait_for(1, 1), wait_status::ok);
}

TEST(HostCounters, ComparisonIsCyclic) {
  EXPECT_TRUE(reached(5, 5));
  EXPECT_FALSE(reached(4, 5));
  EXPECT_TRUE(reached(2, 0xfffffffeu)) << "a counter that wrapped is ahead";
  EXPECT_TRUE(reached(7 + kBrokenLead, 1000)) << "a dead party's GPU counter satisfies any wait";
}

}  // namespace
}  // namespace gpumem::sync
