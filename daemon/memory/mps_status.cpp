#include "memory/mps_status.hpp"

#ifdef GPUMEM_WITH_CUDA
#include "gpumem/shared/cuda/driver.hpp"
#endif

namespace gpumem::daemon {

bool mps_active() noexcept {
#ifdef GPUMEM_WITH_CUDA
  const cuda::driver_api* cu = cuda::driver();
  CUdevice device = 0;
  int enabled = 0;
  return cu != nullptr && cu->cuDeviceGet(&device, 0) == CUDA_SUCCESS &&
         cu->cuDeviceGetAttribute(&enabled, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, device) ==
             CUDA_SUCCESS &&
         enabled != 0;
#else
  return false;
#endif
}

}  // namespace gpumem::daemon
