#include "durations.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace py = pybind11;

namespace gpumem::python {

namespace {

constexpr double kLongestSeconds = 365.0 * 24 * 3600;  // as good as for ever

}  // namespace

std::optional<std::chrono::nanoseconds> duration_from(py::handle timeout, const char* what) {
  if (timeout.is_none()) return std::nullopt;
  const py::object seconds_object = py::hasattr(timeout, "total_seconds")
                                        ? timeout.attr("total_seconds")()
                                        : py::reinterpret_borrow<py::object>(timeout);
  const double seconds = py::float_(seconds_object);
  if (std::isnan(seconds) || seconds < 0) {
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
