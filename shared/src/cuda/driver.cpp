#include "gpumem/shared/cuda/driver.hpp"

#include <dlfcn.h>

#include <mutex>

namespace gpumem::cuda {

namespace {
// Entry points are asked for at the API level of CUDA 12.0, the oldest driver gpumem supports.
constexpr int kApiVersion = 12000;

// cuda.h maps some names to versioned symbols (cuMemFree -> cuMemFree_v2), and the table's
// names arrive here already mapped; cuGetProcAddress wants the plain name and picks the version.
std::string plain_name(std::string name) {
  for (const char* suffix : {"_ptsz", "_ptds"}) {
    if (name.ends_with(suffix)) name.resize(name.size() - 5);
  }
  if (const auto at = name.rfind("_v");
      at != std::string::npos && at + 2 < name.size() &&
      name.find_first_not_of("0123456789", at + 2) == std::string::npos) {
    name.resize(at);
  }
  return name;
}

struct loaded {
  driver_api api;
  bool ready = false;
  std::string why_not;
};

loaded load() {
  loaded result;
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = ::dlerror();
    result.why_not = reason != nullptr ? reason : "libcuda.so.1 not found";
    return result;
  }
  using get_proc_address =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto resolve = reinterpret_cast<get_proc_address>(::dlsym(library, "cuGetProcAddress_v2"));
  if (resolve == nullptr) {
    result.why_not = "the CUDA driver is older than 12.0 (no cuGetProcAddress_v2)";
    return result;
  }
#define GPUMEM_X(name)                                                                       \
  {                                                                                          \
    void* entry = nullptr;                                                                   \
    CUdriverProcAddressQueryResult found{};                                                  \
    if (resolve(plain_name(#name).c_str(), &entry, kApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, \
                &found) != CUDA_SUCCESS ||                                                   \
        entry == nullptr) {                                                                  \
      result.why_not = "the CUDA driver lacks " + plain_name(#name);                         \
      return result;                                                                         \
    }                                                                                        \
    result.api.name = reinterpret_cast<decltype(result.api.name)>(entry);                    \
  }
  GPUMEM_CUDA_DRIVER_API(GPUMEM_X)
#undef GPUMEM_X
  if (const CUresult status = result.api.cuInit(0); status != CUDA_SUCCESS) {
    const char* text = nullptr;
    result.api.cuGetErrorString(status, &text);
    result.why_not = std::string("cuInit: ") + (text != nullptr ? text : "failed");
    return result;
  }
  result.ready = true;
  return result;
}
}  // namespace

const driver_api* driver(std::string* why_not) noexcept {
  // Never destroyed: owners of CUDA handles in static objects free them during exit, after
  // a table with static storage would be gone.
  static const loaded& once = *new loaded(load());
  if (!once.ready && why_not != nullptr) *why_not = once.why_not;
  return once.ready ? &once.api : nullptr;
}

std::string describe(CUresult status) {
  const driver_api* api = driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api != nullptr) {
    api->cuGetErrorName(status, &name);
    api->cuGetErrorString(status, &text);
  }
  return std::string(name != nullptr ? name : "CUDA error " + std::to_string(status)) + " (" +
         (text != nullptr ? text : "no description") + ")";
}

std::string failure_text(CUresult status, const char* call, const std::source_location& where) {
  return std::string(call) + ": " + describe(status) + " at " + where.file_name() + ":" +
         std::to_string(where.line());
}

void check(CUresult status, const char* call, std::source_location where) {
  if (status == CUDA_SUCCESS) return;
  throw cuda_error(status, failure_text(status, call, where));
}

}  // namespace gpumem::cuda
