#pragma once
/// @file
/// @brief What a host wait on counters (a barrier's round, a channel's slot or item) tells the
/// caller.

#include "gpumem/shared/sync/host_counters.hpp"
#include "gpumem/sync.hpp"

namespace gpumem::detail {

/// A wait that a signal's handler ended (only within sync::signals_end_waits, which Python's
/// module sets) reads as a timeout: the caller has the handler's exception to give.
inline BarrierStatus barrier_status_of(sync::wait_status status) noexcept {
  switch (status) {
    case sync::wait_status::ok:
      return BarrierStatus::ok;
    case sync::wait_status::timeout:
    case sync::wait_status::interrupted:
      return BarrierStatus::timeout;
    case sync::wait_status::broken:
      break;
  }
  return BarrierStatus::broken;
}

}  // namespace gpumem::detail
