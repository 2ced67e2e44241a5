#pragma once
/// @file
/// @brief A barrier's and a channel's whole protocol, for its three domains, in one place.
///
/// Both are per-party monotonic counters on a counter_cell that only their own party writes.
/// - Host: host_counters.hpp (publish, wait until a party got far enough; futex sleeps).
/// - Stream-ordered: a party's stream writes its count on the signal cell's `counts`
///   (cuStreamWriteValue32) and waits with cuStreamWaitValue32(GEQ) on the others'.
/// - Device: kernels read and write the same words (client/include/gpumem/device.cuh).
/// When a party dies or leaves, the daemon calls break_party(); an operator's reset calls
/// reset(), or rewrite() for a cell found corrupt (check_counter_cell()).

#include <cstdint>

#include "gpumem/shared/sync/host_counters.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "gpumem/shared/sync/signal_words.hpp"

namespace gpumem::sync {

/// @brief @p party will never move again: every host waiter is woken and told broken; on
/// @p page (the object's device signal page, nullptr for host objects) the broken word is set
/// and the party's count jumps kBrokenLead ahead, so that no stream waits on it forever.
/// @throws what @p page throws.
void break_party(counter_cell& cell, signal_words* page, std::uint32_t index, std::uint32_t party);

/// @brief Starts over with @p parties parties and epoch @p epoch, on the host page and on
/// @p page; the domain stays.
void reset(counter_cell& cell, signal_words* page, std::uint32_t index, std::uint32_t parties,
           std::uint32_t epoch);

/// @brief Like reset(), and the domain is cleared too: for a cell the daemon found corrupt
/// and no longer trusts any word of.
void rewrite(counter_cell& cell, signal_words* page, std::uint32_t index, std::uint32_t parties,
             std::uint32_t epoch);

}  // namespace gpumem::sync
