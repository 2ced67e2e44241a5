#pragma once
// A lock cell whose queue has no place left: every entry given up by a waiter that timed out
// while the holder held the lock, which only the holder's release clears.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

#include "gpumem/shared/sync/host_lock.hpp"

namespace gpumem::testing {

/// Fills @p cell's queue behind its holder with places given up, by waiters of slots 2 to
/// kLockQueueLength + 1.
inline void fill_queue_with_places_given_up(sync::lock_cell& cell) {
  using namespace std::chrono_literals;
  for (std::uint32_t late = 0; late < sync::kLockQueueLength; ++late) {
    sync::host_lock timing_out(cell, static_cast<std::uint16_t>(2 + late));
    ASSERT_EQ(timing_out.acquire(sync::host_lock::clock::now() + 100us).status,
              sync::acquire_status::timeout);
  }
}

}  // namespace gpumem::testing
