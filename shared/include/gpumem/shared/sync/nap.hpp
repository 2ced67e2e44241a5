#pragma once
/// @file
/// @brief A timed sleep that a signal's handler cuts short, for waits that look again after a
/// while (nothing to sleep on wakes them) and must still end when signals_end_waits says so.

#include <chrono>

namespace gpumem::sync {

/// @brief Sleeps for @p duration, or until a signal's handler has run: unlike
/// std::this_thread::sleep_for, which sleeps on after the handler, whatever its SA_RESTART.
/// @return true when a signal's handler ended the sleep early.
bool nap(std::chrono::nanoseconds duration) noexcept;

}  // namespace gpumem::sync
