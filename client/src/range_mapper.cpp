#include "range_mapper.hpp"

#include "host_range_mapper.hpp"

#ifdef GPUMEM_WITH_CUDA
#include "cuda_range_mapper.hpp"
#endif

namespace gpumem::detail {

#ifndef GPUMEM_WITH_CUDA
namespace {
[[noreturn]] void refuse_cuda() {
  throw Error(errc::not_supported, "this libgpumem was built without CUDA support");
}
}  // namespace
#endif

void require_backend(int device) {
  if (device == kHost) return;
#ifdef GPUMEM_WITH_CUDA
  cuda_driver();
#else
  refuse_cuda();
#endif
}

std::unique_ptr<range_mapper> reserve_range(int device, std::size_t max_size,
                                            std::size_t chunk_size) {
  if (device == kHost) return std::make_unique<host_range_mapper>(max_size, chunk_size);
#ifdef GPUMEM_WITH_CUDA
  return std::make_unique<cuda_range_mapper>(cuda_driver(), device, max_size, chunk_size);
#else
  refuse_cuda();
#endif
}

}  // namespace gpumem::detail
