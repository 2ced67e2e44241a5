#pragma once
/// @file
/// @brief What the daemon reports, as plain dicts and lists with the keys of `gpumemctl --json`
/// (the same field descriptions produce both).

#include <pybind11/pybind11.h>

#include "gpumem/gpumem.hpp"

namespace gpumem::python {

pybind11::dict status(Client& client);
pybind11::dict stats(Client& client);
pybind11::list clients(Client& client);
pybind11::list allocations(Client& client);
pybind11::list reservations(Client& client);
pybind11::list sync_objects(Client& client);
pybind11::list usage(Client& client);

}  // namespace gpumem::python
