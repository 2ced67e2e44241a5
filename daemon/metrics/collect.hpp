#pragma once
/// @file
/// @brief A snapshot of the daemon's metrics, taken from the books on the loop.

#include <sys/types.h>

#include <cstddef>

#include "books.hpp"
#include "metrics/family.hpp"

namespace gpumem::daemon::metrics {

/// Whose series a snapshot shows. Series per uid and per label tell what other tenants do, so
/// they are for administrators; everyone sees the node's totals.
struct audience {
  bool every_uid = false;  ///< every uid's and every label's series
  uid_t uid = 0;           ///< otherwise this uid's series and those of its clients' labels
};

/// Distinct uids, and client labels, with series of their own: those that own the most bytes
/// (then have the most connections). The rest are summed into one series named "other", so
/// that client-chosen labels cannot grow the output, or a time-series database, without bound.
inline constexpr std::size_t kMaxUidSeries = 64;
inline constexpr std::size_t kMaxLabelSeries = 64;

/// @brief Pools, clients, objects, what each uid and label owns, departures, owner deaths,
/// what was reclaimed, requests and their latency by message type, errors by code, events.
snapshot collect(const books& state, const audience& who);

}  // namespace gpumem::daemon::metrics
