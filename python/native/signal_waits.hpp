#pragma once
/// @file
/// @brief Host waits that Ctrl-C ends, as Python's own blocking calls (threading.Lock.acquire,
/// time.sleep) are.
///
/// Python runs signal handlers between bytecodes, so a thread that waits in C++ for another
/// process would otherwise see Ctrl-C only when the wait is over: never, if that process never
/// comes. Each wait here runs within sync::signals_end_waits, which lets a signal that
/// interrupts its sleep end it early; then Python's handlers run, and what they raise
/// (KeyboardInterrupt) propagates, with the wait's object as it was (a lock's place in its
/// queue given up, a barrier's arrival kept). A handler that raises nothing has the wait go on
/// for the time left. Only the main thread runs the handlers; waits on other threads go on.

#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "gpumem/shared/sync/signals_end_waits.hpp"

namespace gpumem::python {

/// @brief Runs wait(left) until it ends other than early, or the time is up.
/// @param timeout none: no limit; each wait then gets an hour, and waits again.
/// @param wait takes the time left (std::chrono::nanoseconds) and lets go of the GIL itself.
/// @param ended_early whether its result is a timeout: before the deadline, a signal's doing.
/// @throws pybind11::error_already_set what a signal handler raised.
template <class Wait, class EndedEarly>
auto wait_through_signals(std::optional<std::chrono::nanoseconds> timeout, Wait&& wait,
                          EndedEarly&& ended_early) {
  using clock = std::chrono::steady_clock;
  const bool limited = timeout.has_value();
  const clock::time_point deadline = limited ? clock::now() + *timeout : clock::time_point::max();
  for (;;) {
    const std::chrono::nanoseconds left =
        limited ? std::max<std::chrono::nanoseconds>(deadline - clock::now(), {})
                : std::chrono::hours(1);
    auto result = [&] {
      sync::signals_end_waits ended_by_signals;
      return wait(left);
    }();
    if (!ended_early(result)) return result;
    if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();
    if (limited && clock::now() >= deadline) return result;
  }
}

}  // namespace gpumem::python
