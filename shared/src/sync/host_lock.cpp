#include "gpumem/shared/sync/host_lock.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>

#include "gpumem/shared/sync/backoff.hpp"
#include "gpumem/shared/sync/futex.hpp"
#include "gpumem/shared/sync/nap.hpp"
#include "gpumem/shared/sync/signals_end_waits.hpp"

namespace gpumem::sync {

namespace {

std::atomic_ref<std::uint64_t> word_of(lock_cell& cell) noexcept {
  return std::atomic_ref<std::uint64_t>(cell.word);
}

std::uint32_t& entry_of(lock_cell& cell, std::uint16_t ticket) noexcept {
  return cell.queue[ticket % kLockQueueLength];
}

std::atomic_ref<std::uint32_t> entry_ref(lock_cell& cell, std::uint16_t ticket) noexcept {
  return std::atomic_ref<std::uint32_t>(entry_of(cell, ticket));
}

bool is_holder(lock_word word, std::uint16_t slot, lock_hold hold) noexcept {
  return word.owner == slot && word.serving == hold.ticket && word.epoch == hold.epoch;
}

/// True when @p ticket is queued behind the holder: taken and not yet served.
bool is_queued(lock_word word, std::uint16_t ticket) noexcept {
  const auto ahead = static_cast<std::uint16_t>(ticket - word.serving);
  return ahead >= 1 && ahead < word.queued();
}

/// The pauses of a waiter that finds the queue full: of waiters, or of places given up
/// (timeouts), which only the holder's release clears, however long it holds. Nothing wakes
/// such a waiter, so it looks again after naps that grow to kLongest: a lock held for an hour
/// costs it a few hundred wake-ups a second at most, not a spin.
class full_queue_pauses {
 public:
  /// @return true when a signal cut the nap short and signals_end_waits says the wait ends.
  bool pause(std::optional<host_lock::clock::time_point> deadline) noexcept {
    std::chrono::nanoseconds length = next_;
    if (deadline) length = std::min(length, *deadline - host_lock::clock::now());
    next_ = std::min(next_ * 2, kLongest);
    return nap(length) && signals_end_waits::signal_ends_wait();
  }

 private:
  static constexpr std::chrono::nanoseconds kLongest = std::chrono::milliseconds(2);
  std::chrono::nanoseconds next_ = std::chrono::microseconds(50);
};

}  // namespace

acquire_result host_lock::held_result(std::uint64_t raw) noexcept {
  const lock_word word = lock_word::decode(raw);
  const lock_hold hold{word.serving, word.epoch};
  if ((word.flags & lock_word::kNotRecoverable) != 0) {
    // Pass it on so that everyone queued learns it too; nobody may use what it protects.
    release(hold);
    return {acquire_status::not_recoverable, {}};
  }
  const bool died = (word.flags & lock_word::kOwnerDied) != 0;
  return {died ? acquire_status::acquired_owner_died : acquire_status::acquired, hold,
          word.held_alone()};
}

std::optional<acquire_result> host_lock::try_acquire() noexcept {
  auto word = word_of(cell_);
  std::uint64_t raw = word.load(std::memory_order_acquire);
  for (;;) {
    const lock_word current = lock_word::decode(raw);
    if ((current.flags & lock_word::kNotRecoverable) != 0) {
      return acquire_result{acquire_status::not_recoverable, {}};
    }
    if (!current.free()) return std::nullopt;
    lock_word taken = current;
    taken.owner = slot_;  // alone: no ticket, so that releasing restores the word exactly
    if (word.compare_exchange_weak(raw, taken.encode(), std::memory_order_acquire,
                                   std::memory_order_acquire)) {
      return held_result(taken.encode());
    }
  }
}

acquire_result host_lock::acquire(std::optional<clock::time_point> deadline) noexcept {
  auto word = word_of(cell_);
  backoff contention;
  full_queue_pauses full;
  for (;;) {
    if (auto taken = try_acquire()) return *taken;
    std::uint64_t raw = word.load(std::memory_order_acquire);
    const lock_word current = lock_word::decode(raw);
    if (current.free()) continue;
    // Claim the entry first: from the moment the ticket is ours, others can see who has it.
    const queue_entry mine{current.ticket_to_take(), slot_, false, queue_entry::waiting};
    std::uint32_t empty = 0;
    auto entry = entry_ref(cell_, mine.ticket);
    if (!entry.compare_exchange_strong(empty, mine.encode(), std::memory_order_acq_rel)) {
      if (deadline && clock::now() >= *deadline) return {acquire_status::timeout, {}};
      if (queue_entry::decode(empty).ticket == mine.ticket) {
        contention.pause();  // another claimer of this ticket: it takes it or lets go at once
      } else if (full.pause(deadline)) {
        return {acquire_status::interrupted, {}};
      }
      continue;
    }
    lock_word queued = current;
    queued.next = static_cast<std::uint16_t>(mine.ticket + 1);
    if (word.compare_exchange_strong(raw, queued.encode(), std::memory_order_acq_rel)) {
      const acquire_result waited = wait_turn(mine, deadline);
      // A timeout before the deadline is a turn the daemon abandoned (a reset rewrote the
      // cell): queue again.
      if (waited.status != acquire_status::timeout || (deadline && clock::now() >= *deadline)) {
        return waited;
      }
      continue;
    }
    entry.store(0, std::memory_order_release);
  }
}

std::optional<std::uint16_t> host_lock::try_take_stream_ticket() noexcept {
  auto word = word_of(cell_);
  for (;;) {
    std::uint64_t raw = word.load(std::memory_order_acquire);
    lock_word current = lock_word::decode(raw);
    const queue_entry mine{current.ticket_to_take(), slot_, true, queue_entry::waiting};
    std::uint32_t empty = 0;
    auto entry = entry_ref(cell_, mine.ticket);
    // In use by the turn a queue's length before, still to be passed on the GPU (the queue is
    // full), or by another claimer of this ticket a moment ago.
    if (!entry.compare_exchange_strong(empty, mine.encode(), std::memory_order_acq_rel)) {
      return std::nullopt;
    }
    lock_word taken = current;
    taken.next = static_cast<std::uint16_t>(mine.ticket + 1);
    if (word.compare_exchange_strong(raw, taken.encode(), std::memory_order_acq_rel)) {
      return mine.ticket;
    }
    entry.store(0, std::memory_order_release);
  }
}

acquire_result host_lock::wait_turn(queue_entry mine,
                                    std::optional<clock::time_point> deadline) noexcept {
  auto entry = entry_ref(cell_, mine.ticket);
  const std::uint32_t waiting = mine.encode();
  const auto started = clock::now();
  const auto spin_until = started + spin_.now();
  bool slept = false;
  bool interrupted = false;
  while (entry.load(std::memory_order_acquire) == waiting) {
    const auto now = clock::now();
    if (interrupted || (deadline && now >= *deadline)) {
      std::uint32_t expected = waiting;
      if (entry.compare_exchange_strong(expected, mine.with(queue_entry::abandoned).encode(),
                                        std::memory_order_acq_rel)) {
        return {interrupted ? acquire_status::interrupted : acquire_status::timeout, {}};
      }
      break;  // granted in the meantime: take it
    }
    if (now < spin_until) {
      cpu_relax();
    } else {
      slept = true;
      interrupted = futex_wait(&entry_of(cell_, mine.ticket), waiting,
                               deadline ? std::optional<std::chrono::nanoseconds>(*deadline - now)
                                        : std::nullopt) &&
                    signals_end_waits::signal_ends_wait();
    }
  }
  // Not granted: abandoned for us (the daemon took us for dead, or a reset rewrote the cell). A
  // wait that a signal ended says so, or the caller would queue again.
  const acquire_status gave_up =
      interrupted ? acquire_status::interrupted : acquire_status::timeout;
  if (queue_entry::decode(entry.load(std::memory_order_acquire)).state != queue_entry::granted) {
    return {gave_up, {}};
  }
  spin_.learn(clock::now() - started, slept);
  // Granted: the releaser moves the word to our ticket next (or the daemon, if it died).
  auto word = word_of(cell_);
  const std::uint32_t granted = mine.with(queue_entry::granted).encode();
  backoff handing_over;
  for (;;) {
    const std::uint64_t raw = word.load(std::memory_order_acquire);
    const lock_word current = lock_word::decode(raw);
    if (current.serving == mine.ticket && current.owner == slot_) {
      entry.store(0, std::memory_order_release);
      const acquire_result held = held_result(raw);
      if (!interrupted || held.status == acquire_status::not_recoverable) return held;
      // Granted as a signal's handler raised: the caller gets its exception, not the lock, so
      // the turn goes on at once, with the news of a dead holder if that is how it came.
      release(held.hold, held.status == acquire_status::acquired_owner_died
                             ? release_mode::owner_died
                             : release_mode::normal);
      return {acquire_status::interrupted, {}};
    }
    if (entry.load(std::memory_order_acquire) != granted) return {gave_up, {}};
    handing_over.pause();
  }
}

release_status host_lock::release(lock_hold hold, release_mode mode) noexcept {
  auto word = word_of(cell_);
  std::uint64_t raw = word.load(std::memory_order_acquire);
  auto candidate = static_cast<std::uint16_t>(hold.ticket + 1);
  backoff contention;
  for (;;) {
    const lock_word current = lock_word::decode(raw);
    if (!is_holder(current, slot_, hold)) return release_status::not_owner;
    lock_word after = current;
    switch (mode) {
      case release_mode::normal:
        // Released without mark_consistent(): what it protects may be half repaired.
        if ((current.flags & lock_word::kOwnerDied) != 0) {
          after.flags = lock_word::kNotRecoverable;
        }
        break;
      case release_mode::owner_died:
        after.flags |= lock_word::kOwnerDied;
        break;
      case release_mode::reset:
        after.flags = 0;
        after.epoch = static_cast<std::uint16_t>(current.epoch + 1);
        break;
    }
    if (current.held_alone() || candidate == current.next) {
      // Nobody queued: free at the ticket after ours, or at ours if we never took one.
      if (!current.held_alone()) after.serving = candidate;
      after.owner = 0;
      if (word.compare_exchange_weak(raw, after.encode(), std::memory_order_release,
                                     std::memory_order_acquire)) {
        return release_status::released;
      }
      continue;  // someone queued meanwhile
    }
    after.serving = candidate;
    auto entry = entry_ref(cell_, candidate);
    std::uint32_t entry_raw = entry.load(std::memory_order_acquire);
    const queue_entry waiter = queue_entry::decode(entry_raw);
    if (waiter.ticket != candidate || waiter.state == queue_entry::empty) {
      contention.pause();  // cannot happen while the claim-then-take order holds
      raw = word.load(std::memory_order_acquire);
      continue;
    }
    if (waiter.state == queue_entry::abandoned) {
      entry.compare_exchange_strong(entry_raw, 0, std::memory_order_acq_rel);
      candidate = static_cast<std::uint16_t>(candidate + 1);
      continue;
    }
    if (waiter.state == queue_entry::waiting &&
        !entry.compare_exchange_strong(entry_raw, waiter.with(queue_entry::granted).encode(),
                                       std::memory_order_acq_rel)) {
      continue;  // it gave up just now: look again
    }
    after.owner = waiter.slot;
    while (!word.compare_exchange_weak(raw, after.encode(), std::memory_order_release,
                                       std::memory_order_acquire)) {
      const lock_word now = lock_word::decode(raw);
      if (!is_holder(now, slot_, hold)) return release_status::not_owner;
      after.next = now.next;  // only waiters queueing can have changed it
    }
    futex_wake(&entry_of(cell_, candidate), 1);
    return release_status::released;
  }
}

bool host_lock::mark_consistent(lock_hold hold) noexcept {
  auto word = word_of(cell_);
  std::uint64_t raw = word.load(std::memory_order_acquire);
  for (;;) {
    const lock_word current = lock_word::decode(raw);
    if (!is_holder(current, slot_, hold)) return false;
    lock_word repaired = current;
    repaired.flags = static_cast<std::uint8_t>(current.flags & ~lock_word::kOwnerDied);
    if (word.compare_exchange_weak(raw, repaired.encode(), std::memory_order_acq_rel)) return true;
  }
}

namespace {

/// Attempts a daemon-side loop makes before it gives up on a cell: enough to skip a queue full
/// of abandoned tickets and to ride out clients racing on the word, never enough to wait.
constexpr unsigned kDaemonAttempts = 4 * kLockQueueLength;
/// Looks at a queued ticket's empty entry before the cell counts as corrupt: during a reset a
/// live holder may be releasing too, and it empties the entries it skips just before it moves
/// the word.
constexpr unsigned kEmptyEntryLooks = 256;
constexpr std::uint8_t kKnownFlags = lock_word::kOwnerDied | lock_word::kNotRecoverable;

bool in_use(const lock_facts& facts, std::uint16_t slot) noexcept {
  return slot != 0 && facts.slots.test(slot);
}

struct daemon_release {
  bool released = false;
  const char* broken_rule = nullptr;
};

/// host_lock::release for a holder that died (owner_died) or is revoked (reset), on words
/// that any client may have written: bounded, checked, never waiting.
daemon_release release_for(lock_cell& cell, std::uint16_t holder, lock_hold hold, release_mode mode,
                           const lock_facts& facts) noexcept {
  auto word = word_of(cell);
  std::uint64_t raw = word.load(std::memory_order_acquire);
  auto candidate = static_cast<std::uint16_t>(hold.ticket + 1);
  unsigned empty_looks = 0;
  for (unsigned attempt = 0; attempt < kDaemonAttempts; ++attempt) {
    const lock_word current = lock_word::decode(raw);
    if (!is_holder(current, holder, hold)) return {};
    if (current.queued() > kLockQueueLength + 1) {
      return {false, "more tickets are taken than the queue holds"};
    }
    lock_word after = current;
    if (mode == release_mode::reset) {
      after.flags = 0;
      after.epoch = static_cast<std::uint16_t>(facts.epoch + 1);
    } else {
      after.flags |= lock_word::kOwnerDied;
    }
    if (current.held_alone() || candidate == current.next) {
      if (!current.held_alone()) after.serving = candidate;
      after.owner = 0;
      if (word.compare_exchange_strong(raw, after.encode(), std::memory_order_release,
                                       std::memory_order_acquire)) {
        return {true, nullptr};
      }
      continue;
    }
    after.serving = candidate;
    if (!is_queued(current, candidate)) return {false, "the next ticket went behind the holder"};
    auto entry = entry_ref(cell, candidate);
    std::uint32_t entry_raw = entry.load(std::memory_order_acquire);
    const queue_entry waiter = queue_entry::decode(entry_raw);
    if (waiter.ticket != candidate || waiter.state == queue_entry::empty) {
      if (++empty_looks > kEmptyEntryLooks) return {false, "a queued ticket has no queue entry"};
      cpu_relax();
      raw = word.load(std::memory_order_acquire);
      continue;
    }
    if (waiter.state == queue_entry::abandoned) {
      entry.compare_exchange_strong(entry_raw, 0, std::memory_order_acq_rel);
      candidate = static_cast<std::uint16_t>(candidate + 1);
      continue;
    }
    if (!in_use(facts, waiter.slot)) return {false, "a waiter's slot belongs to no client"};
    if (waiter.state == queue_entry::waiting &&
        !entry.compare_exchange_strong(entry_raw, waiter.with(queue_entry::granted).encode(),
                                       std::memory_order_acq_rel)) {
      continue;
    }
    after.owner = waiter.slot;
    for (; attempt < kDaemonAttempts; ++attempt) {
      if (word.compare_exchange_strong(raw, after.encode(), std::memory_order_release,
                                       std::memory_order_acquire)) {
        futex_wake(&entry_of(cell, candidate), 1);
        return {true, nullptr};
      }
      const lock_word now = lock_word::decode(raw);
      if (!is_holder(now, holder, hold)) return {};
      after.next = now.next;  // only waiters queueing can have changed it
    }
  }
  return {false, "the lock word kept changing"};
}

}  // namespace

lock_word load_lock_word(const lock_cell& cell) noexcept {
  return lock_word::decode(word_of(const_cast<lock_cell&>(cell)).load(std::memory_order_acquire));
}

const char* check_lock_cell(const lock_cell& cell, const lock_facts& facts) noexcept {
  auto& shared = const_cast<lock_cell&>(cell);
  const std::uint32_t where_word =
      std::atomic_ref<std::uint32_t>(shared.domain).load(std::memory_order_acquire);
  if (!is_domain_word(where_word)) return "the domain word names no domain";
  const bool stream = domain_of(where_word) == domain::stream;
  const lock_word word = load_lock_word(cell);
  if ((word.flags & ~kKnownFlags) != 0) return "the lock word has flags no lock sets";
  if (word.epoch != facts.epoch) return "the lock word's epoch is not the daemon's";
  if (stream) {
    // Stream holders take tickets on the host but are served on the signal page.
    if (word.owner != 0) return "a stream-ordered lock's word names a host holder";
  } else {
    if (word.queued() > kLockQueueLength + 1) return "more tickets are taken than the queue holds";
    if (word.owner == 0 && !word.free()) {
      return "tickets are taken but the lock word names no holder";
    }
    if (word.owner != 0 && !in_use(facts, word.owner)) {
      return "the holder's slot belongs to no client";
    }
  }
  for (std::uint32_t index = 0; index < kLockQueueLength; ++index) {
    const std::uint32_t raw =
        std::atomic_ref<std::uint32_t>(shared.queue[index]).load(std::memory_order_acquire);
    if (raw == 0) continue;
    const queue_entry entry = queue_entry::decode(raw);
    if (entry.state == queue_entry::empty) return "a queue entry has bits but no state";
    if (entry.ticket % kLockQueueLength != index) {
      return "a queue entry sits at another ticket's place";
    }
    if (entry.slot == 0) return "a queue entry names no slot";
    // An abandoned entry may outlive its client: the next release skips it.
    if (entry.state != queue_entry::abandoned && !in_use(facts, entry.slot)) {
      return "a queue entry's slot belongs to no client";
    }
    if (entry.stream != stream) return "a queue entry's form is not the lock's domain";
  }
  return nullptr;
}

lock_repair reclaim_lock(lock_cell& cell, std::uint16_t dead, const lock_facts& facts) noexcept {
  if (const char* rule = check_lock_cell(cell, facts)) return {repair_status::corrupt, rule};
  auto word = word_of(cell);
  bool settled = true;
  for (std::uint32_t index = 0; index < kLockQueueLength; ++index) {
    auto entry = std::atomic_ref<std::uint32_t>(cell.queue[index]);
    std::uint32_t raw = entry.load(std::memory_order_acquire);
    const queue_entry found = queue_entry::decode(raw);
    if (found.state == queue_entry::empty || found.slot != dead || found.stream) continue;
    const lock_word current = lock_word::decode(word.load(std::memory_order_acquire));
    if (found.state == queue_entry::waiting) {
      // Queued: skip it when its turn comes. Not queued: a claim it never completed.
      const std::uint32_t replacement =
          is_queued(current, found.ticket) ? found.with(queue_entry::abandoned).encode() : 0;
      if (!entry.compare_exchange_strong(raw, replacement, std::memory_order_acq_rel)) {
        settled = false;  // granted meanwhile: handled on the next call
      }
    } else if (found.state == queue_entry::granted) {
      if (current.serving == found.ticket && current.owner == dead) {
        entry.store(0, std::memory_order_release);  // it is the holder: released below
      } else if (is_queued(current, found.ticket)) {
        settled = false;  // its releaser is moving the word to it right now
      } else {
        entry.store(0, std::memory_order_release);
      }
    }
  }
  const lock_word current = lock_word::decode(word.load(std::memory_order_acquire));
  if (current.owner == dead) {
    std::atomic_ref<std::uint32_t>(cell.owner_deaths).fetch_add(1, std::memory_order_relaxed);
    const daemon_release outcome =
        release_for(cell, dead, {current.serving, current.epoch}, release_mode::owner_died, facts);
    if (outcome.broken_rule != nullptr) return {repair_status::corrupt, outcome.broken_rule};
  }
  return {settled ? repair_status::done : repair_status::in_flight, nullptr};
}

const char* reset_lock(lock_cell& cell, const lock_facts& facts) noexcept {
  const char* rule = check_lock_cell(cell, facts);
  auto word = word_of(cell);
  for (unsigned attempt = 0; rule == nullptr && attempt < kDaemonAttempts; ++attempt) {
    std::uint64_t raw = word.load(std::memory_order_acquire);
    const lock_word current = lock_word::decode(raw);
    if (current.owner != 0) {
      const daemon_release outcome = release_for(
          cell, current.owner, {current.serving, current.epoch}, release_mode::reset, facts);
      if (outcome.released) return nullptr;
      rule = outcome.broken_rule;  // else the holder released it meanwhile: look again
      continue;
    }
    lock_word cleared = current;
    cleared.flags = 0;
    cleared.epoch = static_cast<std::uint16_t>(facts.epoch + 1);
    if (word.compare_exchange_strong(raw, cleared.encode(), std::memory_order_acq_rel)) {
      return nullptr;
    }
  }
  if (rule == nullptr) rule = "the lock word kept changing";
  rewrite_lock(cell, static_cast<std::uint16_t>(facts.epoch + 1));
  return rule;
}

void rewrite_lock(lock_cell& cell, std::uint16_t epoch) noexcept {
  lock_word fresh;
  fresh.epoch = epoch;
  std::atomic_ref<std::uint32_t>(cell.domain).store(0, std::memory_order_relaxed);
  std::atomic_ref<std::uint32_t>(cell.owner_deaths).store(0, std::memory_order_relaxed);
  std::array<bool, kLockQueueLength> had_waiter{};
  for (std::uint32_t index = 0; index < kLockQueueLength; ++index) {
    const std::uint32_t was =
        std::atomic_ref<std::uint32_t>(cell.queue[index]).exchange(0, std::memory_order_relaxed);
    had_waiter[index] = queue_entry::decode(was).state == queue_entry::waiting;
  }
  word_of(cell).store(fresh.encode(), std::memory_order_release);
  // Waiters find their entry emptied, not granted, and queue again.
  for (std::uint32_t index = 0; index < kLockQueueLength; ++index) {
    if (had_waiter[index]) futex_wake(&cell.queue[index]);
  }
}

void mark_lock_not_recoverable(lock_cell& cell) noexcept {
  word_of(cell).fetch_or(std::uint64_t{lock_word::kNotRecoverable} << 28,
                         std::memory_order_acq_rel);
}

}  // namespace gpumem::sync
