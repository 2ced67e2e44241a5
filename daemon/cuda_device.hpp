#pragma once
/// @file
/// @brief A CUDA device as a request names it: the daemon's memory and sync backends both start
/// from its primary context.

#include <cstdint>

#include "gpumem/shared/cuda/handles.hpp"

namespace gpumem::daemon {

/// @brief Retains the primary context of CUDA device @p device.
/// @throws request_error(no_such_device) naming the device and how many there are;
/// cuda::cuda_error when the driver fails.
cuda::primary_context retain_device(const cuda::driver_api& cu, std::int32_t device);

}  // namespace gpumem::daemon
