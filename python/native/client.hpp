#pragma once
/// @file
/// @brief gpumem.Client and the native connect(): the C++ gpumem::Client, with keyword
/// arguments for its option structs. Every round trip lets the GIL go.

#include <pybind11/pybind11.h>

namespace gpumem::python {

void bind_client(pybind11::module_& module);

}  // namespace gpumem::python
