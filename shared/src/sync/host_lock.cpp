#include "gpumem/shared/sync/host_lock.hpp"

#include <sched.h>

#include <atomic>
#include <thread>

#include "gpumem/shared/sync/futex.hpp"

namespace gpumem::sync {

namespace {

using namespace std::chrono_literals;

/// How long a waiter spins before it sleeps: a hand-off between two running processes takes
/// a few microseconds, a futex wake-up tens.
constexpr auto kSpinBeforeSleep = 20us;

std::atomic_ref<std::uint64_t> word_of(lock_cell& cell) noexcept {
  return std::atomic_ref<std::uint64_t>(cell.word);
}

std::uint32_t& entry_of(lock_cell& cell, std::uint16_t ticket) noexcept {
  return cell.queue[ticket % kLockQueueLength];
}

std::atomic_ref<std::uint32_t> entry_ref(lock_cell& cell, std::uint16_t ticket) noexcept {
  return std::atomic_ref<std::uint32_t>(entry_of(cell, ticket));
}

/// Backs off from a short spin to yielding to sleeping, for waits on another process's
/// next few instructions (which it may not be running).
class backoff {
 public:
  void pause() noexcept {
    ++rounds_;
    if (rounds_ < 64) {
      cpu_relax();
    } else if (rounds_ < 128) {
      ::sched_yield();
    } else {
      std::this_thread::sleep_for(50us);
    }
  }

 private:
  unsigned rounds_ = 0;
};

bool is_holder(lock_word word, std::uint16_t slot, lock_hold hold) noexcept {
  return word.owner == slot && word.serving == hold.ticket && word.epoch == hold.epoch;
}

/// True when @p ticket is queued behind the holder: taken and not yet served.
bool is_queued(lock_word word, std::uint16_t ticket) noexcept {
  const auto ahead = static_cast<std::uint16_t>(ticket - word.serving);
  return ahead >= 1 && ahead < word.queued();
}

}  // namespace

acquire_result host_lock::held_result(std::uint64_t raw) noexcept {
  const lock_word word = lock_word::decode(raw);
  const lock_hold hold{word.serving, word.epoch};
  if ((word.flags & lock_word::kNotRecoverable) != 0) {
    // Pass it on so that everyone queued learns it too; nobody may use what it protects.
    release(hold);
    return {acquire_status::not_recoverable, {}};
  }
  if ((word.flags & lock_word::kOwnerDied) != 0) return {acquire_status::acquired_owner_died, hold};
  return {acquire_status::acquired, hold};
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
    taken.next = static_cast<std::uint16_t>(current.next + 1);
    taken.owner = slot_;
    if (word.compare_exchange_weak(raw, taken.encode(), std::memory_order_acquire,
                                   std::memory_order_acquire)) {
      return held_result(taken.encode());
    }
  }
}

acquire_result host_lock::acquire(std::optional<clock::time_point> deadline) noexcept {
  auto word = word_of(cell_);
  backoff contention;
  for (;;) {
    if (auto taken = try_acquire()) return *taken;
    std::uint64_t raw = word.load(std::memory_order_acquire);
    const lock_word current = lock_word::decode(raw);
    if (current.free()) continue;
    // Claim the entry first: from the moment the ticket is ours, others can see who has it.
    const queue_entry mine{current.next, slot_, false, queue_entry::waiting};
    std::uint32_t empty = 0;
    auto entry = entry_ref(cell_, current.next);
    if (!entry.compare_exchange_strong(empty, mine.encode(), std::memory_order_acq_rel)) {
      contention.pause();  // another claimer races for this ticket, or the queue is full
      continue;
    }
    lock_word queued = current;
    queued.next = static_cast<std::uint16_t>(current.next + 1);
    if (word.compare_exchange_strong(raw, queued.encode(), std::memory_order_acq_rel)) {
      return wait_turn(mine, deadline);
    }
    entry.store(0, std::memory_order_release);
  }
}

std::uint16_t host_lock::take_stream_ticket() noexcept {
  auto word = word_of(cell_);
  backoff full;
  for (;;) {
    std::uint64_t raw = word.load(std::memory_order_acquire);
    lock_word current = lock_word::decode(raw);
    const queue_entry mine{current.next, slot_, true, queue_entry::waiting};
    std::uint32_t empty = 0;
    auto entry = entry_ref(cell_, current.next);
    if (!entry.compare_exchange_strong(empty, mine.encode(), std::memory_order_acq_rel)) {
      full.pause();  // kLockQueueLength turns are queued on the GPU: wait for it to catch up
      continue;
    }
    lock_word taken = current;
    taken.next = static_cast<std::uint16_t>(current.next + 1);
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
  const auto spin_until = clock::now() + kSpinBeforeSleep;
  while (entry.load(std::memory_order_acquire) == waiting) {
    const auto now = clock::now();
    if (deadline && now >= *deadline) {
      std::uint32_t expected = waiting;
      if (entry.compare_exchange_strong(expected, mine.with(queue_entry::abandoned).encode(),
                                        std::memory_order_acq_rel)) {
        return {acquire_status::timeout, {}};
      }
      break;  // granted in the meantime: take it
    }
    if (now < spin_until) {
      cpu_relax();
    } else {
      futex_wait(
          &entry_of(cell_, mine.ticket), waiting,
          deadline ? std::optional<std::chrono::nanoseconds>(*deadline - now) : std::nullopt);
    }
  }
  if (queue_entry::decode(entry.load(std::memory_order_acquire)).state != queue_entry::granted) {
    return {acquire_status::timeout, {}};  // abandoned for us: the daemon took us for dead
  }
  // Granted: the releaser moves the word to our ticket next (or the daemon, if it died).
  auto word = word_of(cell_);
  backoff handing_over;
  for (;;) {
    const std::uint64_t raw = word.load(std::memory_order_acquire);
    const lock_word current = lock_word::decode(raw);
    if (current.serving == mine.ticket && current.owner == slot_) {
      entry.store(0, std::memory_order_release);
      return held_result(raw);
    }
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
    after.serving = candidate;
    if (candidate == current.next) {
      after.owner = 0;
      if (word.compare_exchange_weak(raw, after.encode(), std::memory_order_release,
                                     std::memory_order_acquire)) {
        return release_status::released;
      }
      continue;  // someone queued meanwhile
    }
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

bool reclaim_lock(lock_cell& cell, std::uint16_t dead) noexcept {
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
    host_lock(cell, dead).release({current.serving, current.epoch}, release_mode::owner_died);
  }
  return settled;
}

void reset_lock(lock_cell& cell) noexcept {
  auto word = word_of(cell);
  std::uint64_t raw = word.load(std::memory_order_acquire);
  for (;;) {
    const lock_word current = lock_word::decode(raw);
    if (current.owner != 0) {
      const auto outcome = host_lock(cell, current.owner)
                               .release({current.serving, current.epoch}, release_mode::reset);
      if (outcome == release_status::released) return;
      raw = word.load(std::memory_order_acquire);
      continue;
    }
    lock_word cleared = current;
    cleared.flags = 0;
    cleared.epoch = static_cast<std::uint16_t>(current.epoch + 1);
    if (word.compare_exchange_weak(raw, cleared.encode(), std::memory_order_acq_rel)) return;
  }
}

}  // namespace gpumem::sync
