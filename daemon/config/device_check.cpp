#include "config/device_check.hpp"

#include <cstdint>
#include <optional>

#ifdef GPUMEM_WITH_CUDA
#include "gpumem/shared/cuda/driver.hpp"
#endif

namespace gpumem::daemon {

namespace {
struct named_device {
  std::string key;  ///< pools[1].device, pools[1].peer_access[0]
  std::int32_t device;
};

std::vector<named_device> cuda_devices_named(const daemon_config& config) {
  std::vector<named_device> named;
  for (std::size_t i = 0; i < config.pools.size(); ++i) {
    const pool_config& pool = config.pools[i];
    const std::string entry = "pools[" + std::to_string(i) + "]";
    if (pool.device != proto::kHostDevice) named.push_back({entry + ".device", pool.device});
    for (std::size_t j = 0; j < pool.peer_access.size(); ++j) {
      named.push_back({entry + ".peer_access[" + std::to_string(j) + "]", pool.peer_access[j]});
    }
  }
  return named;
}

#ifdef GPUMEM_WITH_CUDA
/// The devices the driver sees, or nullopt with @p why_not when it cannot be asked.
std::optional<int> visible_devices(std::string& why_not) {
  const cuda::driver_api* driver = cuda::driver(&why_not);
  if (driver == nullptr) return std::nullopt;
  int count = 0;
  if (const CUresult status = driver->cuDeviceGetCount(&count); status != CUDA_SUCCESS) {
    why_not = "cuDeviceGetCount failed with status " + std::to_string(status);
    return std::nullopt;
  }
  return count;
}
#endif
}  // namespace

std::vector<std::string> check_devices(const daemon_config& config, const std::string& source) {
  const std::vector<named_device> named = cuda_devices_named(config);
  if (named.empty()) return {};
#ifndef GPUMEM_WITH_CUDA
  throw config_error(source + ": " + named.front().key +
                     ": this gpumemd was built without the CUDA backend, so it cannot make "
                     "CUDA pools");
#else
  std::string why_not;
  const std::optional<int> devices = visible_devices(why_not);
  std::vector<std::string> unchecked;
  for (const named_device& each : named) {
    if (!devices) {
      unchecked.push_back(each.key + ": CUDA device " + std::to_string(each.device) +
                          " not checked: no CUDA driver to ask (" + why_not + ")");
    } else if (each.device >= *devices) {
      throw config_error(source + ": " + each.key + ": CUDA device " + std::to_string(each.device) +
                         " does not exist: this machine has " + std::to_string(*devices) +
                         " CUDA device(s)" +
                         (*devices > 0 ? ", 0 to " + std::to_string(*devices - 1) : ""));
    }
  }
  return unchecked;
#endif
}

}  // namespace gpumem::daemon
