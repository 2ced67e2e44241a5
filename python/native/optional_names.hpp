#pragma once
/// @file
/// @brief Optional names as Python passes them (None: no name) to the library, which takes an
/// empty name for none.

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <string_view>

namespace gpumem::python {

/// @brief A view of the argument itself (which outlives the call), empty for None.
/// @throws ValueError for an empty string, which would otherwise make it anonymous.
inline std::string_view name_or_none(const std::optional<std::string>& name, const char* what) {
  if (name && name->empty()) {
    throw pybind11::value_error(std::string(what) + " must not be empty (None: no name)");
  }
  return name ? std::string_view(*name) : std::string_view{};
}

}  // namespace gpumem::python
