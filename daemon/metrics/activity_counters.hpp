#pragma once
/// @file
/// @brief Counts of what happened to clients and locks that the books no longer show once it is
/// over: connections, departures, lock holders that died holding, what departed clients owned.

#include <cstdint>

namespace gpumem::daemon::metrics {

struct activity_counters {
  std::uint64_t connections = 0;   ///< hellos accepted, resumed sessions included
  std::uint64_t disconnected = 0;  ///< clients whose library closed the connection
  std::uint64_t died = 0;          ///< clients whose process ended without closing it
  /// Locks whose holder died holding them (or holding a turn of a stream-ordered lock): the
  /// next holder was told the owner died.
  std::uint64_t owner_deaths = 0;
  std::uint64_t reclaimed_bytes = 0;    ///< memory departed clients owned, taken back from them
  std::uint64_t reclaimed_objects = 0;  ///< allocations, reservations, locks, barriers, channels
};

}  // namespace gpumem::daemon::metrics
