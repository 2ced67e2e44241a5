#include "gpumem/shared/sync/host_counters.hpp"

#include <atomic>

#include "gpumem/shared/sync/futex.hpp"
#include "gpumem/shared/sync/signals_end_waits.hpp"

namespace gpumem::sync {

namespace {

using namespace std::chrono_literals;

/// Where futex_waitv is refused, a sleeper sleeps on its word alone and re-checks the broken
/// flag and the epoch this often: the daemon's wake-up can come between those checks and the
/// sleep.
constexpr auto kLongestSleep = 10ms;

std::atomic_ref<std::uint32_t> ref(std::uint32_t& word) noexcept {
  return std::atomic_ref<std::uint32_t>(word);
}

}  // namespace

void host_counters::publish(std::uint32_t party, std::uint32_t count) noexcept {
  ref(cell_.counts[party]).store(count, std::memory_order_release);
  futex_wake(&cell_.counts[party]);
}

std::uint32_t host_counters::count(std::uint32_t party) const noexcept {
  return ref(cell_.counts[party]).load(std::memory_order_acquire);
}

bool host_counters::broken() const noexcept {
  return (ref(cell_.state).load(std::memory_order_acquire) & counter_cell::kBroken) != 0;
}

std::uint32_t host_counters::epoch() const noexcept {
  return ref(cell_.epoch).load(std::memory_order_acquire);
}

std::uint32_t host_counters::parties() const noexcept {
  return ref(cell_.parties).load(std::memory_order_acquire);
}

void host_counters::arrive(std::uint32_t party, std::uint32_t round) noexcept {
  ref(cell_.counts[party]).store(round, std::memory_order_release);
  const std::uint32_t arrived = ref(cell_.arrivals).fetch_add(1, std::memory_order_acq_rel) + 1;
  if (arrived == round * parties()) futex_wake(&cell_.arrivals);
}

wait_status host_counters::wait_all(std::uint32_t round,
                                    std::optional<clock::time_point> deadline) noexcept {
  return wait_word(cell_.arrivals, round * parties(), deadline);
}

wait_status host_counters::wait_for(std::uint32_t party, std::uint32_t target,
                                    std::optional<clock::time_point> deadline) noexcept {
  return wait_word(cell_.counts[party], target, deadline);
}

wait_status host_counters::wait_word(std::uint32_t& word, std::uint32_t target,
                                     std::optional<clock::time_point> deadline) noexcept {
  const auto started = clock::now();
  const auto spin_until = started + spin_.now();
  const std::uint32_t started_in = epoch();
  bool slept = false;
  for (unsigned spins = 0;; ++spins) {
    // What was reached stays reached, also once the cell broke; a reset ends the rounds of
    // the epoch the wait began in. The broken flag is read before the count: a party that
    // publishes and then leaves is broken by the daemon after it left, so a count read after
    // the flag holds all it published. Read the other way round, a count read before its last
    // publishes, then the flag set since, would lose items it did publish.
    const std::uint32_t state = ref(cell_.state).load(std::memory_order_acquire);
    const bool broken_before = (state & counter_cell::kBroken) != 0;
    const std::uint32_t seen = ref(word).load(std::memory_order_acquire);
    if (epoch() != started_in) return wait_status::broken;
    if (reached(seen, target)) {
      spin_.learn(clock::now() - started, slept);
      return wait_status::ok;
    }
    if (broken_before) return wait_status::broken;
    const auto now = clock::now();
    if (deadline && now >= *deadline) return wait_status::timeout;
    if (now < spin_until) {
      spin_turn(spins);
      continue;
    }
    slept = true;
    // The word, the state and the epoch in one sleep: a break or a reset since they were read
    // above changed one of them, and the sleep does not begin. Those wake the word's sleepers.
    const futex_expectation ends[] = {
        {&word, seen}, {&cell_.state, state}, {&cell_.epoch, started_in}};
    bool signalled = false;
    switch (futex_wait_any(ends, deadline)) {
      case futex_sleep::ended:
        break;
      case futex_sleep::signal:
        signalled = true;
        break;
      case futex_sleep::unavailable: {
        std::chrono::nanoseconds nap = kLongestSleep;
        if (deadline) nap = std::min(nap, std::chrono::nanoseconds(*deadline - now));
        signalled = futex_wait(&word, seen, nap);
        break;
      }
    }
    if (signalled && signals_end_waits::signal_ends_wait()) return wait_status::interrupted;
  }
}

const char* check_counter_cell(const counter_cell& cell, const counter_facts& facts) noexcept {
  auto& shared = const_cast<counter_cell&>(cell);
  const std::uint32_t where = ref(shared.domain).load(std::memory_order_acquire);
  if (!is_domain_word(where)) return "the domain word names no domain";
  if (ref(shared.parties).load(std::memory_order_acquire) != facts.parties) {
    return "the party count is not the daemon's";
  }
  if (ref(shared.epoch).load(std::memory_order_acquire) != facts.epoch) {
    return "the epoch is not the daemon's";
  }
  const std::uint32_t state = ref(shared.state).load(std::memory_order_acquire);
  if ((state & ~counter_cell::kBroken) != 0) return "the state word has bits nobody sets";
  // Counts on the host page move only for host objects; a broken one's counts are left as
  // its parties stopped.
  if (domain_of(where) != domain::host || state != 0 || facts.parties > kMaxParties) {
    return nullptr;
  }
  if (facts.channel) {
    const std::uint32_t published = ref(shared.counts[0]).load(std::memory_order_acquire);
    for (std::uint32_t consumer = 1; consumer < facts.parties; ++consumer) {
      if (!reached(published, ref(shared.counts[consumer]).load(std::memory_order_acquire))) {
        return "a consumer released items the producer never published";
      }
    }
    return nullptr;
  }
  // A party stores its round, then counts it among the arrivals: the rounds add up to the
  // arrivals, plus at most one arrival per party in between.
  const std::uint32_t arrivals = ref(shared.arrivals).load(std::memory_order_acquire);
  std::uint32_t rounds = 0;
  for (std::uint32_t party = 0; party < facts.parties; ++party) {
    rounds += ref(shared.counts[party]).load(std::memory_order_acquire);
  }
  if (rounds - arrivals > facts.parties) return "the arrivals do not add up to the rounds";
  return nullptr;
}

void break_counters(counter_cell& cell) noexcept {
  ref(cell.state).fetch_or(counter_cell::kBroken, std::memory_order_acq_rel);
  // Every sleeper sleeps on the state word too, unless futex_waitv is refused to it; every
  // count is woken for those, not just the parties' the cell claims: the daemon breaks cells
  // whose party count a client may have rewritten.
  futex_wake(&cell.state);
  for (auto& count : cell.counts) futex_wake(&count);
  futex_wake(&cell.arrivals);
}

void reset_counters(counter_cell& cell, std::uint32_t parties, std::uint32_t epoch) noexcept {
  for (auto& count : cell.counts) ref(count).store(0, std::memory_order_relaxed);
  ref(cell.parties).store(parties, std::memory_order_relaxed);
  ref(cell.arrivals).store(0, std::memory_order_relaxed);
  ref(cell.state).store(0, std::memory_order_relaxed);
  ref(cell.epoch).store(epoch, std::memory_order_release);
  for (auto& count : cell.counts) futex_wake(&count);
  futex_wake(&cell.arrivals);
}

}  // namespace gpumem::sync
