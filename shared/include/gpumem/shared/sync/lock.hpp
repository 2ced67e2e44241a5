#pragma once
/// @file
/// @brief A named lock's whole protocol, for its three domains, in one place.
///
/// - Host: the ticket lock of host_lock.hpp on the lock_cell of the host page: acquire and
///   release by holders, reclaim_lock() and reset_lock() by the daemon.
/// - Stream-ordered: a holder takes a ticket on the host (host_lock::try_take_stream_ticket,
///   which claims its queue entry), and its stream waits until the signal cell's `serving`
///   equals the ticket; releasing writes, in stream order, the words of stream_release_writes().
/// - Device: kernels spin on the signal cell's `device_lock` word (client/include/gpumem/
///   device.cuh), with `owner_died` set by the daemon when a holder's process died holding it.
/// After a death the daemon calls reclaim() once per lock the dead client had opened; an
/// operator's reset calls reset(), or rewrite() for a lock the daemon found corrupt. None of
/// them trusts the cell: see the daemon side of host_lock.hpp.

#include <array>
#include <cstddef>
#include <cstdint>

#include "gpumem/shared/sync/host_lock.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "gpumem/shared/sync/signal_words.hpp"

namespace gpumem::sync {

/// One word a stream writes to release a stream-ordered hold.
struct stream_write {
  enum class word_type { serving, queue_entry };  ///< signal cell's serving; host queue entry
  word_type word;
  std::uint32_t value;
};

/// @brief What a stream writes, in this order, to release @p ticket: the next turn, then its
/// queue entry cleared. A death between the two leaves an entry whose turn has passed, which
/// the daemon recognises by the word past it; the other order would lose the turn.
constexpr std::array<stream_write, 2> stream_release_writes(std::uint16_t ticket) noexcept {
  return {{{stream_write::word_type::serving, static_cast<std::uint16_t>(ticket + 1)},
           {stream_write::word_type::queue_entry, 0}}};
}

struct reclaim_result {
  lock_repair repair;                 ///< in_flight: call again later; corrupt: nothing was done
  std::uint32_t turns_passed = 0;     ///< stream-ordered: the dead client's turns to pass on
  bool device_lock_released = false;  ///< device: it died holding the lock
};

/// @brief After the process of @p dead_slot exited: its host holds and queued tickets are
/// released or abandoned (the next holder is told the owner died), its stream turns are passed
/// on as they come (signal_words::pass_turn()) and their queue entries abandoned until then,
/// its device lock is released with owner_died set. A cell that breaks a rule of
/// check_lock_cell() is left alone and reported.
/// @param page the signal page of the lock's device; nullptr when it has none (host lock, or
/// no stream or kernel ever used it). @throws what @p page throws.
reclaim_result reclaim(lock_cell& cell, signal_words* page, std::uint32_t index,
                       std::uint16_t dead_slot, const lock_facts& facts);

/// @brief For a daemon that restarted: gives @p page, which has no turns yet, the turns of
/// dead stream holders that the daemon before it had not seen passed. Their abandoned queue
/// entries are the record of them: they live in the host page, which outlives the daemon, and
/// go only with free_passed_turn(). A cell that breaks a rule of check_lock_cell() is left
/// alone and reported, as by reclaim(). @throws what @p page throws.
reclaim_result resume_stream_turns(lock_cell& cell, signal_words& page, std::uint32_t index,
                                   const lock_facts& facts);

/// @brief Frees the queue entry of a dead holder's turn @p ticket once the daemon has seen the
/// turn passed (its pass landed, or its word was past it), so that the ticket a queue's
/// length after it can be taken. An entry that is no longer that turn's is left as it is.
void free_passed_turn(lock_cell& cell, std::uint16_t ticket) noexcept;

struct reset_result {
  /// false for a consistent stream-ordered lock: its turns pass on by themselves after a
  /// death and there is nothing to reset.
  bool supported = true;
  const char* rewritten_because = nullptr;  ///< the rule that made it rewrite the cell
};

/// @brief Operator reset: a holder is released (its later release is refused as stale), the
/// owner-died and not-recoverable flags are cleared, a device lock is freed, and the epoch
/// becomes facts.epoch + 1. A cell that is not consistent is rewritten (rewrite()).
reset_result reset(lock_cell& cell, signal_words* page, std::uint32_t index,
                   const lock_facts& facts);

/// @brief Rewrites the cell and its signal cell on @p page from scratch as a fresh lock of
/// epoch @p epoch: for a lock the daemon found corrupt and no longer trusts any word of.
void rewrite(lock_cell& cell, signal_words* page, std::uint32_t index, std::uint16_t epoch);

}  // namespace gpumem::sync
