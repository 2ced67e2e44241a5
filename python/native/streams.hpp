#pragma once
/// @file
/// @brief CUDA streams as Python passes them, and ordering one stream after another.

#include <pybind11/pybind11.h>

#include <optional>

#include "gpumem/gpumem.hpp"

namespace gpumem::python {

/// @brief The stream a `stream=` argument names: None (the default stream), an int (a
/// cudaStream_t), any object with `__cuda_stream__` (the CUDA Python stream protocol), a
/// torch.cuda.Stream or a CuPy stream. Reads attributes only: imports neither torch nor CuPy.
/// @throws TypeError for anything else, ValueError for a negative int.
Stream stream_from(pybind11::handle object);

/// @brief The consumer's stream of `__dlpack__(stream=...)` for CUDA memory, as the Python
/// array API standard writes it: None and 1 the legacy default stream, 2 the per-thread
/// default stream, a larger int the stream itself; -1 asks for no ordering (nullopt).
/// @throws ValueError for 0 (ambiguous) and other negative numbers.
/// For memory on the host (@p device kHost), which has nothing to order: None or an int,
/// checked only for its type, and nullopt.
/// @throws TypeError for anything but None and an int; ValueError for 0 (ambiguous) and other
/// negative numbers, for CUDA memory.
std::optional<Stream> dlpack_consumer_stream(pybind11::handle stream, int device);

/// @brief The `stream` of `__cuda_array_interface__` for work queued on @p stream: the legacy
/// default stream (1) for the null stream, else the handle.
std::uintptr_t array_interface_stream(Stream stream) noexcept;

/// @brief Makes @p consumer wait for the work queued so far on @p producer, a stream of
/// device @p device, through an event: the host never waits.
/// @throws Error(not_supported) without CUDA, Error(cuda_error) when the driver refuses.
void order_after(Stream consumer, Stream producer, int device);

}  // namespace gpumem::python
