#pragma once
/// @file
/// @brief Per-party counters on a counter_cell, on the host: a party publishes how far it got
/// (rounds arrived, items published or consumed); others wait until it got far enough. Barriers
/// and channels are built from these two operations.

#include <chrono>
#include <cstdint>
#include <optional>

#include "gpumem/shared/sync/layout.hpp"
#include "gpumem/shared/sync/spin_budget.hpp"

namespace gpumem::sync {

/// interrupted: a signal handler raised while the wait slept (signals_end_waits).
enum class wait_status { ok, timeout, broken, interrupted };

/// Counters compare cyclically, as cuStreamWaitValue32's GEQ does: they may wrap.
constexpr bool reached(std::uint32_t count, std::uint32_t target) noexcept {
  return static_cast<std::int32_t>(count - target) >= 0;
}

class host_counters {
 public:
  using clock = std::chrono::steady_clock;

  explicit host_counters(counter_cell& cell) noexcept : cell_(cell) {}

  void publish(std::uint32_t party, std::uint32_t count) noexcept;
  /// @brief Barrier arrival at @p round: publishes it and counts it among all arrivals.
  void arrive(std::uint32_t party, std::uint32_t round) noexcept;
  /// @brief Waits until every party arrived at @p round, the cell broke, or @p deadline.
  wait_status wait_all(std::uint32_t round,
                       std::optional<clock::time_point> deadline = std::nullopt) noexcept;
  /// @brief Waits until @p party's counter reached @p target, the cell broke, or @p deadline.
  wait_status wait_for(std::uint32_t party, std::uint32_t target,
                       std::optional<clock::time_point> deadline = std::nullopt) noexcept;
  std::uint32_t count(std::uint32_t party) const noexcept;
  bool broken() const noexcept;
  std::uint32_t epoch() const noexcept;
  std::uint32_t parties() const noexcept;

 private:
  /// Waits until @p word reached @p target (see wait_for).
  wait_status wait_word(std::uint32_t& word, std::uint32_t target,
                        std::optional<clock::time_point> deadline) noexcept;

  counter_cell& cell_;
  /// 20 us to 250 us: a round between running parties takes a few, a futex wake-up tens.
  spin_budget spin_{std::chrono::microseconds(20), std::chrono::microseconds(250)};
};

// Daemon side: bounded, and never trusting the cell, which every client can write.

/// What the daemon knows of a barrier or channel from memory that no client can write.
struct counter_facts {
  std::uint32_t parties = 0;
  std::uint32_t epoch = 0;  ///< only the daemon changes it (a reset)
  bool channel = false;     ///< party 0 the producer, the others consumers
};

/// @brief Checks the words of @p cell against @p facts and against each other, as they can
/// be in any state live parties leave them in.
/// @return nullptr when consistent, else the rule the cell breaks.
const char* check_counter_cell(const counter_cell& cell, const counter_facts& facts) noexcept;

/// @brief When a party died or left: marks the cell broken and wakes every sleeper. A wait for
/// what the party had already reached still succeeds; any other wait returns broken.
void break_counters(counter_cell& cell) noexcept;

/// @brief Starts over with @p parties parties: counters to zero, not broken, epoch @p epoch;
/// the domain stays.
void reset_counters(counter_cell& cell, std::uint32_t parties, std::uint32_t epoch) noexcept;

/// How far the daemon moves a dead party's counter on a signal page, where streams wait and
/// cannot look at a broken flag: past any target a live party can have, and still "ahead"
/// under the cyclic comparison.
inline constexpr std::uint32_t kBrokenLead = 1u << 30;

}  // namespace gpumem::sync
