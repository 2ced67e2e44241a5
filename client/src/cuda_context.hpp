#pragma once
/// @file
/// @brief What the client's CUDA code shares: driver failures as gpumem::CudaError, the
/// driver itself, and a scope that makes a context current and puts the caller's back.

#include <source_location>
#include <string>

#include "call_site.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/shared/cuda/driver.hpp"
#include "gpumem/shared/cuda/handles.hpp"

namespace gpumem::detail {

/// Driver failures reach the user as CudaError: the status, the driver's words, and where.
inline void check_cuda(CUresult status, const char* call,
                       std::source_location where = std::source_location::current()) {
  if (status != CUDA_SUCCESS) {
    throw CudaError(status, cuda::failure_text(status, call, where), call_site_access::make(where));
  }
}

/// The driver, or Error(not_supported) saying why there is none.
inline const cuda::driver_api& cuda_driver() {
  std::string why_not;
  const cuda::driver_api* driver = cuda::driver(&why_not);
  if (driver == nullptr) throw Error(errc::not_supported, "CUDA is unavailable here: " + why_not);
  return *driver;
}

/// cuda::scoped_context that throws when the context cannot be made current: the user's
/// threads call in with their own context current, and get it back.
class context_scope {
 public:
  context_scope(const cuda::driver_api& cu, CUcontext context,
                std::source_location where = std::source_location::current())
      : scope_(cu, context) {
    check_cuda(scope_.status(), "cuCtxSetCurrent", where);
  }

 private:
  cuda::scoped_context scope_;
};

}  // namespace gpumem::detail
