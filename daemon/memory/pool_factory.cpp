#include "memory/pool_factory.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "memory/host_pool.hpp"
#ifdef GPUMEM_WITH_CUDA
#include "memory/cuda_pool.hpp"
#include "memory/cuda_reservation.hpp"
#include "sync/cuda_signal_page.hpp"
#endif

namespace gpumem::daemon {

namespace {
bool names_cuda_pools(const daemon_config& config) {
  return std::any_of(config.pools.begin(), config.pools.end(),
                     [](const pool_config& p) { return p.device != proto::kHostDevice; });
}

#ifdef GPUMEM_WITH_CUDA
void add_cuda_pools(const daemon_config& config, std::vector<std::unique_ptr<pool>>& pools) {
  std::string why_not;
  const cuda::driver_api* driver = cuda::driver(&why_not);
  std::vector<pool_config> wanted;
  for (const auto& each : config.pools) {
    if (each.device != proto::kHostDevice) wanted.push_back(each);
  }
  if (!names_cuda_pools(config)) {
    // The embedded default: one pool per visible device, as large as the device allows.
    int devices = 0;
    if (driver == nullptr || driver->cuDeviceGetCount(&devices) != CUDA_SUCCESS) {
      spdlog::info("CUDA backend unavailable ({}): host pools only", why_not);
      return;
    }
    for (int device = 0; device < devices; ++device) {
      CUdevice handle = 0;
      std::size_t total = 0;
      cuda::check(driver->cuDeviceGet(&handle, device), "cuDeviceGet");
      cuda::check(driver->cuDeviceTotalMem(&total, handle), "cuDeviceTotalMem");
      wanted.push_back(default_cuda_pool(device, total));
    }
  } else if (driver == nullptr) {
    throw config_error("pool '" + wanted.front().name +
                       "' needs CUDA, which is unavailable: " + why_not);
  }
  for (auto& each : wanted) {
    try {
      pools.push_back(
          std::make_unique<cuda_pool>(static_cast<std::uint32_t>(pools.size()), each, *driver));
    } catch (const cuda::cuda_error& error) {
      throw config_error("pool '" + each.name + "': " + error.what());
    }
  }
}
#endif
}  // namespace

std::vector<std::unique_ptr<pool>> make_pools(const daemon_config& config) {
  std::vector<std::unique_ptr<pool>> pools;
  for (const auto& each : config.pools) {
    if (each.device == proto::kHostDevice) {
      pools.push_back(std::make_unique<host_pool>(static_cast<std::uint32_t>(pools.size()), each));
    }
  }
#ifdef GPUMEM_WITH_CUDA
  add_cuda_pools(config, pools);
#else
  if (names_cuda_pools(config)) {
    throw config_error(
        "this gpumemd was built without the CUDA backend (GPUMEM_CUDA=OFF or no "
        "toolkit), so it cannot make CUDA pools");
  }
#endif
  return pools;
}

reservation_maker make_reservation_maker() {
#ifdef GPUMEM_WITH_CUDA
  if (const cuda::driver_api* driver = cuda::driver()) return cuda_reservation_maker(*driver);
#endif
  return {};
}

signal_page_maker make_signal_page_maker() {
#ifdef GPUMEM_WITH_CUDA
  if (const cuda::driver_api* driver = cuda::driver()) return cuda_signal_page_maker(*driver);
#endif
  return {};
}

}  // namespace gpumem::daemon
