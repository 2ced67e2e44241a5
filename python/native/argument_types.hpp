#pragma once
/// @file
/// @brief Telling argument types apart where Python's own conversions would blur them: NumPy's
/// scalars are not subclasses of Python's, and int() and float() take a bool.

#include <pybind11/pybind11.h>

#include <string>

namespace gpumem::python {

/// The module of @p object's type ("numpy", "torch.cuda", ...); empty when it has none.
std::string module_of_type(pybind11::handle object);
/// @brief Whether @p object's type is NumPy's @p name (numpy.bool_ has the name "bool_" in
/// NumPy 1 and "bool" in NumPy 2).
bool is_numpy(pybind11::handle object, const char* name);
/// Python's bool or NumPy's.
bool is_bool(pybind11::handle object);

}  // namespace gpumem::python
