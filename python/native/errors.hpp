#pragma once
/// @file
/// @brief gpumem.Error, the one exception type (a subclass of OSError) with .code, a member of
/// the gpumem.errc enum, and the message of the C++ gpumem::Error.

#include <pybind11/pybind11.h>

namespace gpumem::python {

/// @brief Adds errc and Error to @p module and turns every gpumem::Error that crosses into
/// Python into gpumem.Error.
void bind_errors(pybind11::module_& module);

}  // namespace gpumem::python
