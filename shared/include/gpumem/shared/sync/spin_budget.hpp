#pragma once
/// @file
/// @brief How long a waiter spins before it sleeps, learnt from how long its waits last.
///
/// A fixed budget meets the scheduler: parties of a barrier that once wait longer than the
/// budget fall asleep, the futex wake-up of each costs tens of microseconds, which makes the
/// next round's waits long too, and every later round sleeps (sync_bench showed rounds of
/// 1.5 µs in some runs and 43 µs in others of one build). So a wait that slept and still ended
/// soon raises the budget above what it took, a wait that ended while spinning lets it decay
/// slowly, and a wait far longer than any spin shrinks it: parties that work for milliseconds
/// between rounds sleep at once instead of burning a core.

#include <algorithm>
#include <atomic>
#include <chrono>

namespace gpumem::sync {

class spin_budget {
 public:
  using duration = std::chrono::nanoseconds;

  /// A budget between @p least and @p most, starting at @p least. A least of zero lets waits
  /// that always outlast the most (a loaded machine) stop spinning altogether.
  constexpr spin_budget(duration least, duration most) noexcept
      : least_(least.count()), most_(std::max(least, most).count()), budget_(least.count()) {}

  duration now() const noexcept { return duration(budget_.load(std::memory_order_relaxed)); }

  /// @brief Learns from a wait that took @p waited; @p slept says whether it went to sleep.
  void learn(duration waited, bool slept) noexcept {
    const duration budget = now();
    const duration least(least_);
    const duration most(most_);
    duration next = budget;
    if (!slept) {
      next = std::max(least, budget - budget / 64);
    } else if (waited <= most) {
      next = std::clamp(2 * waited, budget, most);
    } else {
      next = std::max(least, budget / 2);
    }
    if (next != budget) budget_.store(next.count(), std::memory_order_relaxed);
  }

 private:
  duration::rep least_;
  duration::rep most_;
  /// Relaxed: a Barrier may be waited on from several threads, and a stale budget only moves
  /// one wait's switch from spinning to sleeping.
  std::atomic<duration::rep> budget_;
};

}  // namespace gpumem::sync
