#pragma once
/// @file
/// @brief Durations as Python passes them: seconds (an int or a float) or a datetime.timedelta.

#include <pybind11/pybind11.h>

#include <chrono>
#include <optional>

namespace gpumem::python {

/// @brief @p timeout as a duration; None and infinity: no limit (nullopt).
/// @throws TypeError for what is neither a number nor a timedelta (a str, a bool, a
/// numpy.timedelta64) and ValueError for NaN or a negative number, naming @p what.
std::optional<std::chrono::nanoseconds> duration_from(pybind11::handle timeout,
                                                      const char* what = "timeout");

/// @brief @p timeout in whole milliseconds for calls that take a limit; None and infinity wait
/// a year, as good as for ever.
std::chrono::milliseconds milliseconds_from(pybind11::handle timeout, const char* what);

}  // namespace gpumem::python
