#pragma once
/// @file
/// @brief `__dlpack__` and `__dlpack_device__` as the Python array API standard writes them,
/// for any exported range: a DLPack 1.0 versioned capsule (with the read-only flag) when the
/// consumer's max_version allows it, a 0.x capsule otherwise.

#include <pybind11/pybind11.h>

#include "exported_range.hpp"

namespace gpumem::python {

/// @brief (device type, device id): (1, 0) for host memory, (2, N) for memory of CUDA device N.
pybind11::tuple dlpack_device(int device);

/// @brief A capsule whose tensor (1-D, uint8, the whole range) holds range.owner until the
/// consumer's deleter runs.
/// @throws BufferError when the memory cannot be exported as asked (another device, a copy,
/// or read-only host memory to a consumer that cannot be told it is read-only).
pybind11::capsule dlpack_capsule(const exported_range& range, pybind11::handle max_version,
                                 pybind11::handle dl_device, pybind11::handle copy);

}  // namespace gpumem::python
