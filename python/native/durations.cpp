#include "durations.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "argument_types.hpp"

namespace py = pybind11;

namespace gpumem::python {

namespace {

constexpr double kLongestSeconds = 365.0 * 24 * 3600;  // as good as for ever

}  // namespace

std::optional<std::chrono::nanoseconds> duration_from(py::handle timeout, const char* what) {
  if (timeout.is_none()) return std::nullopt;
  const bool is_timedelta = py::hasattr(timeout, "total_seconds");
  // float() would take a string ("0.1") or bytes, a bool is an int, and a numpy.timedelta64
  // reads as its count of units: none is seconds.
  if (!is_timedelta && (is_bool(timeout) || is_numpy(timeout, "timedelta64") ||
                        PyNumber_Check(timeout.ptr()) == 0)) {
    throw py::type_error(std::string(what) +
                         " takes seconds (an int or a float) or a datetime.timedelta, not " +
                         std::string(py::str(py::type::handle_of(timeout).attr("__name__"))));
  }
  const py::object seconds_object =
      is_timedelta ? timeout.attr("total_seconds")() : py::reinterpret_borrow<py::object>(timeout);
  const double seconds = py::float_(seconds_object);
  if (std::isnan(seconds)) throw py::value_error(std::string(what) + " is NaN, not a duration");
  if (seconds < 0) {
    throw py::value_error(std::string(what) + " must be a number of seconds, not negative");
  }
  if (std::isinf(seconds)) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(std::min(seconds, kLongestSeconds)));
}

std::chrono::milliseconds milliseconds_from(py::handle timeout, const char* what) {
  const auto limit = duration_from(timeout, what);
  if (!limit) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(kLongestSeconds));
  }
  return std::chrono::ceil<std::chrono::milliseconds>(*limit);
}

}  // namespace gpumem::python
