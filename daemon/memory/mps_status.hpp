#pragma once
/// @file
/// @brief Whether this daemon's CUDA contexts are shared through MPS, the condition under which
/// kernels of several processes run at the same time (and device-side locks hand off fast).

namespace gpumem::daemon {

/// @return false without CUDA, or when the driver says contexts are not MPS clients.
bool mps_active() noexcept;

}  // namespace gpumem::daemon
