#include "cuda_device.hpp"

#include <fmt/format.h>

#include "request_error.hpp"

namespace gpumem::daemon {

cuda::primary_context retain_device(const cuda::driver_api& cu, std::int32_t device) {
  int devices = 0;
  cuda::check(cu.cuDeviceGetCount(&devices), "cuDeviceGetCount");
  if (device < 0 || device >= devices) {
    throw request_error(proto::errc::no_such_device,
                        fmt::format("no CUDA device {} ({} here)", device, devices));
  }
  CUdevice handle = 0;
  cuda::check(cu.cuDeviceGet(&handle, device), "cuDeviceGet");
  cuda::primary_context context;
  cuda::check(cuda::primary_context::retain(cu, handle, context), "retaining the primary context");
  return context;
}

}  // namespace gpumem::daemon
