#pragma once
/// @file
/// @brief A driver call that failed, named for the caller's log or error.

#include <cuda.h>

namespace gpumem::daemon {

/// The first driver call that failed; empty when none did.
struct failed_call {
  const char* call = nullptr;
  CUresult status = CUDA_SUCCESS;
  explicit operator bool() const noexcept { return call != nullptr; }
};

}  // namespace gpumem::daemon
