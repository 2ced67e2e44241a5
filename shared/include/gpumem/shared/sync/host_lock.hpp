#pragma once
/// @file
/// @brief The lock algorithm on a lock_cell: a ticket lock whose hand-off, owner and flags
/// change in one compare-and-swap, with a queue of waiters that sleep on their own entry.
///
/// Uncontended, acquire and release are one compare-and-swap each and no system call: a lock
/// taken alone only gains its owner (lock_word's shapes), which the client's inline fast path
/// (gpumem/lock_fast_path.hpp) relies on. A waiter claims the queue entry of the ticket it
/// takes (lock_word::ticket_to_take) before it takes it, so whoever looks at the cell (the
/// releaser, the daemon after a death) always knows who holds each ticket. The releaser grants
/// the first waiting entry, skipping abandoned ones (timeouts, dead waiters), then moves the
/// word to that ticket with the new owner, then wakes it.

#include <chrono>
#include <cstdint>
#include <optional>

#include "gpumem/shared/sync/layout.hpp"
#include "gpumem/shared/sync/spin_budget.hpp"

namespace gpumem::sync {

/// interrupted: a signal handler raised while the wait slept (signals_end_waits); the waiter
/// gave up its place as at a timeout.
enum class acquire_status { acquired, acquired_owner_died, timeout, not_recoverable, interrupted };
enum class release_status { released, not_owner };
/// normal: by the holder. owner_died: by the daemon for a holder that died (the next holder is
/// told). reset: by an operator; clears the flags and bumps the epoch.
enum class release_mode { normal, owner_died, reset };

/// What a holder keeps to release: the ticket and epoch it holds the lock under.
struct lock_hold {
  std::uint16_t ticket = 0;
  std::uint16_t epoch = 0;
};

struct acquire_result {
  acquire_status status = acquire_status::timeout;
  lock_hold hold{};
  /// Taken alone (no ticket; lock_word): until a waiter comes, releasing only clears the owner.
  bool alone = false;
};

class host_lock {
 public:
  using clock = std::chrono::steady_clock;

  host_lock(lock_cell& cell, std::uint16_t slot) noexcept : cell_(cell), slot_(slot) {}

  /// @brief Takes a free lock alone.
  /// @return nullopt when the lock is held or others wait for it (never jumps the queue).
  std::optional<acquire_result> try_acquire() noexcept;
  /// @brief Waits in FIFO order until acquired or @p deadline (none: no limit).
  acquire_result acquire(std::optional<clock::time_point> deadline = std::nullopt) noexcept;
  release_status release(lock_hold hold, release_mode mode = release_mode::normal) noexcept;
  /// @brief Takes the next ticket for a stream-ordered holder, whose queue entry stays until
  /// its stream clears it after passing the turn on, or, the holder dead, until the daemon has
  /// seen the turn passed.
  /// @return nullopt while the entry a queue's length before is still in use (or another
  /// claimer's of the same ticket): the caller backs off (backoff.hpp) and tries again, holding
  /// up nothing of its own meanwhile, since the turn it waits for may be its own to release.
  std::optional<std::uint16_t> try_take_stream_ticket() noexcept;
  /// @brief Clears the owner-died flag: the holder repaired what the dead holder left.
  bool mark_consistent(lock_hold hold) noexcept;
  /// How long the next wait spins before it sleeps, learnt from this object's waits.
  spin_budget::duration spin_before_sleep() const noexcept { return spin_.now(); }

  /// What this process's hold adds to a free word when it takes the lock alone.
  std::uint64_t owner_bits() const noexcept { return lock_word{0, slot_, 0, 0, 0}.encode(); }
  /// @brief The word that releasing @p taken alone leaves, which is what a fast path may guess.
  /// @return nullopt unless it was taken alone and clean (no flag for the release to handle).
  static std::optional<std::uint64_t> free_word_after(const acquire_result& taken) noexcept {
    if (!taken.alone || taken.status != acquire_status::acquired) return std::nullopt;
    return lock_word{taken.hold.ticket, 0, 0, taken.hold.ticket, taken.hold.epoch}.encode();
  }

 private:
  acquire_result wait_turn(queue_entry mine, std::optional<clock::time_point> deadline) noexcept;
  acquire_result held_result(std::uint64_t raw) noexcept;

  lock_cell& cell_;
  std::uint16_t slot_;
  /// 20 us to 250 us, as a barrier's (host_counters.hpp): a hand-off between two running
  /// processes takes a few, a futex wake-up tens. With a fixed 20 us, two processes taking
  /// turns fell into sleeping on every hand-off once one wake-up outlasted it (sync_bench's
  /// contended hand-off read 41.7 us in one run on an H200 host, 0.6 in the others).
  spin_budget spin_{std::chrono::microseconds(20), std::chrono::microseconds(250)};
};

// Daemon side. Every client can write the cell, so the daemon never trusts it: each function
// below checks the words against what the daemon knows from its own memory (lock_facts), makes
// a bounded number of attempts, never sleeps and never waits for another process. A cell that
// breaks a rule is reported (by the rule's text), not spun on.

/// What the daemon knows of a lock from memory that no client can write.
struct lock_facts {
  std::uint16_t epoch = 0;  ///< the cell's epoch: only the daemon changes it (a reset)
  const slot_set& slots;    ///< slots of attached clients (and of dead ones still cleaned up)
};

enum class repair_status {
  done,       ///< the cell is consistent and repaired
  in_flight,  ///< a hand-off to or from the dead client was in flight: call again later
  corrupt,    ///< the cell broke broken_rule and was left as it was
};

struct lock_repair {
  repair_status status = repair_status::done;
  const char* broken_rule = nullptr;  ///< for corrupt: which rule the cell broke
};

/// @brief The lock word of @p cell, read atomically: clients change it at any time.
lock_word load_lock_word(const lock_cell& cell) noexcept;

/// @brief Checks the words of @p cell against @p facts and against each other, as they can
/// be in any state a live client leaves them in.
/// @return nullptr when consistent, else the rule the cell breaks.
const char* check_lock_cell(const lock_cell& cell, const lock_facts& facts) noexcept;

/// @brief After the process behind @p dead exited: abandons its queued tickets and releases
/// what it held, telling the next holder the owner died.
lock_repair reclaim_lock(lock_cell& cell, std::uint16_t dead, const lock_facts& facts) noexcept;

/// @brief Operator reset: releases a holder (whose later release is refused as stale), clears
/// owner-died and not-recoverable, and moves the epoch to facts.epoch + 1. A cell that breaks a
/// rule, or that does not settle within the attempts, is rewritten from scratch instead
/// (rewrite_lock()), and waiters then see their turn abandoned.
/// @return nullptr when reset in place, else the rule that made it rewrite the cell.
const char* reset_lock(lock_cell& cell, const lock_facts& facts) noexcept;

/// @brief Rewrites every word of @p cell as a fresh lock of epoch @p epoch, in no domain yet,
/// and wakes every sleeper. For a cell the daemon no longer trusts any word of.
void rewrite_lock(lock_cell& cell, std::uint16_t epoch) noexcept;

/// @brief Marks the shared word not recoverable (one atomic operation), so that clients using
/// a lock the daemon found corrupt learn it on their next acquire.
void mark_lock_not_recoverable(lock_cell& cell) noexcept;

}  // namespace gpumem::sync
