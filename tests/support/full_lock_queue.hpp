#pragma once
// A held lock whose queue has no place left: every entry given up by a waiter that timed out
// while the holder held it, which only the holder's release clears.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "gpumem/shared/sync/host_lock.hpp"

namespace gpumem::testing {

/// Held by slot 1; its queue's places given up by waiters of slots 2 to kLockQueueLength + 1.
struct held_lock_with_full_queue {
  held_lock_with_full_queue() {
    using namespace std::chrono_literals;
    EXPECT_EQ(held.status, sync::acquire_status::acquired);
    for (std::uint32_t late = 0; late < sync::kLockQueueLength; ++late) {
      sync::host_lock timing_out(*cell, static_cast<std::uint16_t>(2 + late));
      EXPECT_EQ(timing_out.acquire(sync::host_lock::clock::now() + 100us).status,
                sync::acquire_status::timeout);
    }
  }
  sync::release_status release() { return holder.release(held.hold); }

  std::unique_ptr<sync::lock_cell> cell = std::make_unique<sync::lock_cell>();
  sync::host_lock holder{*cell, 1};
  sync::acquire_result held = holder.acquire();
};

}  // namespace gpumem::testing
