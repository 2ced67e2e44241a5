#pragma once
/// @file
/// @brief `__dlpack__` and `__dlpack_device__` of gpumem.Buffer, as the Python array API
/// standard writes them: a DLPack 1.0 versioned capsule (with the read-only flag) when the
/// consumer's max_version allows it, a 0.x capsule otherwise.

#include <pybind11/pybind11.h>

#include "buffer.hpp"

namespace gpumem::python {

/// @brief (device type, device id): (1, 0) for host memory, (2, N) for memory of CUDA device N.
pybind11::tuple dlpack_device(const shared_buffer& buffer);

/// @brief A capsule whose tensor (1-D, uint8, the whole buffer) holds the memory until the
/// consumer's deleter runs. For CUDA memory, the consumer's @p stream first waits for the work
/// queued on the buffer's stream.
/// @throws BufferError when the memory cannot be exported as asked (another device, a copy,
/// or read-only host memory to a consumer that cannot be told it is read-only).
pybind11::capsule dlpack_capsule(const shared_buffer& buffer, pybind11::handle stream,
                                 pybind11::handle max_version, pybind11::handle dl_device,
                                 pybind11::handle copy);

}  // namespace gpumem::python
