#include "memory/pool_factory.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "memory/adopted_device_pool.hpp"
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
void add_default_cuda_pools(std::vector<pool_config>& pools) {
  std::string why_not;
  const cuda::driver_api* driver = cuda::driver(&why_not);
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
    pools.push_back(default_cuda_pool(device, total));
  }
}
#endif
}  // namespace

std::vector<pool_config> resolve_pools(const daemon_config& config) {
  std::vector<pool_config> pools = config.pools;
  if (!names_cuda_pools(config)) {
#ifdef GPUMEM_WITH_CUDA
    add_default_cuda_pools(pools);
#endif
    return pools;
  }
#ifdef GPUMEM_WITH_CUDA
  std::string why_not;
  if (cuda::driver(&why_not) != nullptr) return pools;
  const auto first = std::find_if(pools.begin(), pools.end(), [](const pool_config& p) {
    return p.device != proto::kHostDevice;
  });
  throw config_error("pool '" + first->name + "' needs CUDA, which is unavailable: " + why_not);
#else
  throw config_error(
      "this gpumemd was built without the CUDA backend (GPUMEM_CUDA=OFF or no "
      "toolkit), so it cannot make CUDA pools");
#endif
}

pool_maker make_pool_maker() {
  return [](std::uint32_t id, const pool_config& config,
            [[maybe_unused]] family_room& room) -> std::unique_ptr<pool> {
    if (config.device == proto::kHostDevice) return std::make_unique<host_pool>(id, config);
#ifdef GPUMEM_WITH_CUDA
    if (const cuda::driver_api* driver = cuda::driver()) {
      return std::make_unique<cuda_pool>(id, config, *driver, room);
    }
#endif
    throw std::runtime_error("CUDA is unavailable for pool '" + config.name + "'");
  };
}

std::unique_ptr<pool> adopt_pool(std::uint32_t id, const pool_config& config, unique_fd fd) {
  if (config.device == proto::kHostDevice) {
    return std::make_unique<host_pool>(id, config, std::move(fd));
  }
  return std::make_unique<adopted_device_pool>(id, config, std::move(fd));
}

reservation_adopter make_reservation_adopter() {
#ifdef GPUMEM_WITH_CUDA
  if (const cuda::driver_api* driver = cuda::driver()) return cuda_reservation_adopter(*driver);
#endif
  return {};
}

signal_page_adopter make_signal_page_adopter() {
#ifdef GPUMEM_WITH_CUDA
  if (const cuda::driver_api* driver = cuda::driver()) return cuda_signal_page_adopter(*driver);
#endif
  return {};
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
