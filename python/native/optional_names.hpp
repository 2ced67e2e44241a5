#pragma once
/// @file
/// @brief Optional names as Python passes them (None: no name) to the library, which takes an
/// empty name for none.

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <string_view>

#include "gpumem/gpumem.hpp"

namespace gpumem::python {

/// @brief A view of the argument itself (which outlives the call), empty for None.
/// @throws Error(invalid_name), as for any other name the library refuses, for an empty
/// string, which would otherwise make it anonymous.
inline std::string_view name_or_none(const std::optional<std::string>& name, const char* what) {
  if (name && name->empty()) {
    throw Error(errc::invalid_name, std::string(what) + " '' is empty: None gives no name");
  }
  return name ? std::string_view(*name) : std::string_view{};
}

}  // namespace gpumem::python
