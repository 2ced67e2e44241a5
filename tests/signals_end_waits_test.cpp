// A signal ends a host wait only within sync::signals_end_waits (what Python's module sets so
// that Ctrl-C reaches a blocked thread) and only when the scope's check says a handler raised;
// otherwise the wait keeps its place. What a wait gives up leaves the object working for
// everyone else. Threads stand in for clients, as in host_lock_test.
#include "gpumem/shared/sync/signals_end_waits.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "gpumem/shared/sync/host_counters.hpp"
#include "gpumem/shared/sync/host_lock.hpp"
#include "support/eventually.hpp"
#include "support/full_lock_queue.hpp"
#include "support/thread_state.hpp"

namespace gpumem::sync {
namespace {

using namespace std::chrono_literals;
using gpumem::testing::eventually;
using gpumem::testing::thread_state;

/// SIGUSR1 handled by a handler that does nothing, installed without SA_RESTART as Python
/// installs its own, for as long as it lives.
class quiet_signal {
 public:
  quiet_signal() {
    struct sigaction action {};
    action.sa_handler = [](int) {};
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGUSR1, &action, &before_);
  }
  ~quiet_signal() { ::sigaction(SIGUSR1, &before_, nullptr); }
  quiet_signal(const quiet_signal&) = delete;
  quiet_signal& operator=(const quiet_signal&) = delete;

 private:
  struct sigaction before_ {};
};

/// Long enough for any test to end first; a wait that never ends would hang the test instead of
/// failing it.
host_counters::clock::time_point in_ten_seconds() {
  return host_counters::clock::now() + 10s;
}

lock_word word_of(const lock_cell& cell) {
  return lock_word::decode(
      std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(cell.word)).load());
}

/// What the scope's check answers in these tests (a handler that raised, or not), and how often
/// it was asked.
std::atomic<bool> handler_raises{false};
std::atomic<int> checks_asked{0};
/// A holder that the check releases first, so that the turn comes as the handler raises.
std::atomic<host_lock*> released_by_the_check{nullptr};
lock_hold hold_released_by_the_check;
bool test_check() noexcept {
  ++checks_asked;
  if (host_lock* holder = released_by_the_check.exchange(nullptr)) {
    holder->release(hold_released_by_the_check);
  }
  return handler_raises;
}

/// A thread that waits, with what its wait returned once it did.
template <class Result>
class waiter {
 public:
  template <class Wait>
  waiter(bool within_scope, Wait wait)
      : thread_([this, within_scope, wait] {
          tid_ = static_cast<pid_t>(::syscall(SYS_gettid));
          std::optional<signals_end_waits> scope;
          if (within_scope) scope.emplace(test_check);
          result_ = wait();
          done_ = true;
        }) {}
  ~waiter() { thread_.join(); }
  waiter(const waiter&) = delete;
  waiter& operator=(const waiter&) = delete;

  bool asleep() const { return tid_ != 0 && thread_state(tid_) == 'S'; }
  bool done() const { return done_; }
  Result result() const { return result_; }
  /// Sends SIGUSR1 once the thread sleeps (a signal in its spin would end nothing).
  bool signal_when_asleep() {
    if (!eventually([&] { return asleep() || done(); })) return false;
    return done() || ::pthread_kill(thread_.native_handle(), SIGUSR1) == 0;
  }

 private:
  std::atomic<pid_t> tid_{0};
  std::atomic<bool> done_{false};
  Result result_{};
  std::thread thread_;
};

/// Signals @p waiting @p times, each once it sleeps, and whether it still waits after them.
template <class Result>
bool waits_through_signals(waiter<Result>& waiting, int times) {
  for (int sent = 0; sent < times; ++sent) {
    if (!waiting.signal_when_asleep()) return false;
    std::this_thread::sleep_for(2ms);
  }
  std::this_thread::sleep_for(20ms);
  return !waiting.done();
}

/// A thread of its own slot queued for the lock of @p cell behind the holder, then asleep.
struct lock_waiter {
  lock_waiter(lock_cell& cell, std::uint16_t slot, bool within_scope)
      : lock(cell, slot), waiting(within_scope, [this] {
          held = lock.acquire(in_ten_seconds());
          return held->status;
        }) {}

  host_lock lock;
  std::optional<acquire_result> held;
  waiter<acquire_status> waiting;
};

bool never() noexcept {
  return false;
}
bool always() noexcept {
  return true;
}

TEST(SignalsEndWaits, TheInnermostScopeOnTheThreadDecides) {
  EXPECT_FALSE(signals_end_waits::signal_ends_wait()) << "no scope";
  {
    const signals_end_waits outer(always);
    {
      const signals_end_waits inner(never);
      EXPECT_FALSE(signals_end_waits::signal_ends_wait());
    }
    EXPECT_TRUE(signals_end_waits::signal_ends_wait()) << "an inner scope's end leaves the outer";
    bool on_another_thread = true;
    std::thread([&] { on_another_thread = signals_end_waits::signal_ends_wait(); }).join();
    EXPECT_FALSE(on_another_thread);
  }
  EXPECT_FALSE(signals_end_waits::signal_ends_wait());
}

/// A holder of a lock; queued behind it and asleep, a waiter within the scope (first), and
/// behind that one a waiter without (second).
class LockWaitersAndSignals : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(held.status, acquire_status::acquired);
    first.emplace(*cell, 2, true);
    ASSERT_TRUE(eventually([&] { return first->waiting.asleep(); }));
    second.emplace(*cell, 3, false);
    ASSERT_TRUE(eventually([&] { return second->waiting.asleep(); }));
  }

  const quiet_signal handled;
  std::unique_ptr<lock_cell> cell = std::make_unique<lock_cell>();
  host_lock holder{*cell, 1};
  const acquire_result held = holder.acquire();
  std::optional<lock_waiter> first;
  std::optional<lock_waiter> second;
};

TEST_F(LockWaitersAndSignals, OneWhoseHandlersRaiseNothingKeepsItsPlace) {
  handler_raises = false;
  checks_asked = 0;
  EXPECT_TRUE(waits_through_signals(first->waiting, 5));
  EXPECT_GE(checks_asked, 1) << "no signal cut the sleep short, so none was tested";

  ASSERT_EQ(holder.release(held.hold), release_status::released);
  ASSERT_TRUE(eventually([&] { return first->waiting.done(); })) << "its place was given away";
  EXPECT_EQ(first->waiting.result(), acquire_status::acquired);
  EXPECT_FALSE(second->waiting.done()) << "the waiter behind it went first";
  ASSERT_EQ(first->lock.release(first->held->hold), release_status::released);
  ASSERT_TRUE(eventually([&] { return second->waiting.done(); }));
  EXPECT_EQ(second->waiting.result(), acquire_status::acquired);
  ASSERT_EQ(second->lock.release(second->held->hold), release_status::released);
}

TEST_F(LockWaitersAndSignals, OneWhoseHandlerRaisedGivesUpItsPlaceAndTheOneBehindIsServed) {
  handler_raises = true;
  ASSERT_TRUE(eventually(
      [&] { return first->waiting.signal_when_asleep() && first->waiting.done(); }, 5000ms, 5ms))
      << "the waiter within the scope still waits after the signals";
  EXPECT_EQ(first->waiting.result(), acquire_status::interrupted);
  EXPECT_TRUE(waits_through_signals(second->waiting, 5)) << "a signal ended a wait with no scope";

  ASSERT_EQ(holder.release(held.hold), release_status::released);
  ASSERT_TRUE(eventually([&] { return second->waiting.done(); }))
      << "the release went to the place given up, and the waiter behind it waits on";
  EXPECT_EQ(second->waiting.result(), acquire_status::acquired);
  ASSERT_EQ(second->lock.release(second->held->hold), release_status::released);
  EXPECT_EQ(first->lock.acquire().status, acquire_status::acquired) << "and queues again later";
}

TEST_F(LockWaitersAndSignals, OneGrantedAsItsHandlerRaisedPassesTheTurnOnAtOnce) {
  handler_raises = true;
  hold_released_by_the_check = held.hold;
  released_by_the_check = &holder;
  ASSERT_TRUE(eventually(
      [&] { return first->waiting.signal_when_asleep() && first->waiting.done(); }, 5000ms, 5ms));
  EXPECT_EQ(first->waiting.result(), acquire_status::interrupted)
      << "the caller gets the handler's exception, so not the lock";
  ASSERT_TRUE(eventually([&] { return second->waiting.done(); }))
      << "the turn the interrupted waiter was granted stayed with it";
  EXPECT_EQ(second->waiting.result(), acquire_status::acquired);
  ASSERT_EQ(second->lock.release(second->held->hold), release_status::released);
  EXPECT_TRUE(word_of(*cell).free());
}

TEST(SignalsEndWaits, ALockWaitThatFindsTheQueueFullEndsOnlyWhenAHandlerRaised) {
  // Nothing wakes a waiter that finds no place in the queue: it naps and looks again, and a
  // signal cuts its nap short as it cuts a sleep in the queue.
  const quiet_signal handled;
  handler_raises = false;
  checks_asked = 0;
  gpumem::testing::held_lock_with_full_queue lock;
  host_lock late(*lock.cell, 600);  // a slot the queue's places do not have
  waiter<acquire_status> within(true, [&] { return late.acquire(in_ten_seconds()).status; });

  EXPECT_TRUE(waits_through_signals(within, 5)) << "handlers that raised nothing ended it";
  EXPECT_GE(checks_asked, 1);
  handler_raises = true;
  ASSERT_TRUE(
      eventually([&] { return within.signal_when_asleep() && within.done(); }, 5000ms, 5ms));
  EXPECT_EQ(within.result(), acquire_status::interrupted);
  handler_raises = false;
  EXPECT_EQ(lock.release(), release_status::released);
  EXPECT_EQ(late.acquire(in_ten_seconds()).status, acquire_status::acquired)
      << "the release cleared the places given up";
}

TEST(SignalsEndWaits, ACounterWaitEndsOnlyWhenAHandlerRaisedAndBreaksNothing) {
  const quiet_signal handled;
  handler_raises = false;
  checks_asked = 0;
  auto cell = std::make_unique<counter_cell>();
  cell->parties = 2;
  host_counters counters(*cell);
  waiter<wait_status> within(true, [&] { return counters.wait_for(0, 1, in_ten_seconds()); });
  waiter<wait_status> without(false, [&] { return counters.wait_for(0, 1, in_ten_seconds()); });

  EXPECT_TRUE(waits_through_signals(within, 5)) << "handlers that raised nothing ended it";
  EXPECT_GE(checks_asked, 1);
  handler_raises = true;
  ASSERT_TRUE(
      eventually([&] { return within.signal_when_asleep() && within.done(); }, 5000ms, 5ms));
  EXPECT_EQ(within.result(), wait_status::interrupted);
  EXPECT_TRUE(waits_through_signals(without, 5)) << "a signal ended a wait with no scope";

  counters.publish(0, 1);
  ASSERT_TRUE(eventually([&] { return without.done(); }));
  EXPECT_EQ(without.result(), wait_status::ok);
  EXPECT_FALSE(counters.broken()) << "an interrupted wait breaks nothing";
  EXPECT_EQ(counters.wait_for(0, 1), wait_status::ok) << "and a wait again gets the count";
}

}  // namespace
}  // namespace gpumem::sync
