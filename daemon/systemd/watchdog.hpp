#pragma once
/// @file
/// @brief The service watchdog (sd_watchdog_enabled(3)): with WatchdogSec= set, systemd passes
/// $WATCHDOG_USEC and kills the service when no WATCHDOG=1 arrives within it.

#include <chrono>
#include <optional>

namespace gpumem::daemon::systemd {

/// @brief The watchdog interval from $WATCHDOG_USEC, when it is meant for this process:
/// $WATCHDOG_PID unset or equal to our pid. Ping at least twice per interval.
/// @return nullopt without a watchdog, or when a variable is malformed.
std::optional<std::chrono::microseconds> watchdog_interval() noexcept;

}  // namespace gpumem::daemon::systemd
