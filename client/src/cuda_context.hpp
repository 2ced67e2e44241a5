#pragma once
/// @file
/// @brief What the client's CUDA code shares: driver failures as gpumem::Error, and a scope
/// that makes a context current and puts the caller's back.

#include <string>

#include "gpumem/gpumem.hpp"
#include "gpumem/shared/cuda/driver.hpp"

namespace gpumem::detail {

/// Driver failures reach the user as gpumem::Error(cuda_error) with the driver's words.
inline void check_cuda(CUresult status, const char* call) {
  if (status != CUDA_SUCCESS) {
    throw Error(errc::cuda_error, std::string(call) + ": " + cuda::describe(status));
  }
}

/// The driver, or Error(not_supported) saying why there is none.
inline const cuda::driver_api& cuda_driver() {
  std::string why_not;
  const cuda::driver_api* driver = cuda::driver(&why_not);
  if (driver == nullptr) throw Error(errc::not_supported, "CUDA is unavailable here: " + why_not);
  return *driver;
}

class context_scope {
 public:
  context_scope(const cuda::driver_api& cu, CUcontext context) : cu_(cu) {
    check_cuda(cu_.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent");
    if (previous_ != context) check_cuda(cu_.cuCtxSetCurrent(context), "cuCtxSetCurrent");
  }
  ~context_scope() { cu_.cuCtxSetCurrent(previous_); }
  context_scope(const context_scope&) = delete;
  context_scope& operator=(const context_scope&) = delete;

 private:
  const cuda::driver_api& cu_;
  CUcontext previous_ = nullptr;
};

}  // namespace gpumem::detail
