#include "cuda_range_mapper.hpp"

#include <utility>

namespace gpumem::detail {

cuda_range_mapper::cuda_range_mapper(const cuda::driver_api& cu, int device, std::size_t max_size,
                                     std::size_t chunk_size)
    : cu_(cu), chunk_size_(chunk_size), chunks_(max_size / chunk_size) {
  CUdevice handle = 0;
  check_cuda(cu_.cuDeviceGet(&handle, device), "cuDeviceGet");
  check_cuda(cuda::primary_context::retain(cu_, handle, context_), "retaining the primary context");
  context_scope scope(cu_, context_.get());
  check_cuda(cuda::address_range::reserve(cu_, max_size, chunk_size, range_),
             "cuMemAddressReserve");
}

void* cuda_range_mapper::base() const noexcept {
  return reinterpret_cast<void*>(range_.get());
}

void cuda_range_mapper::map(std::size_t index, int fd, Access access) {
  context_scope scope(cu_, context_.get());
  mapped_chunk chunk;
  check_cuda(cuda::allocation_handle::import_fd(cu_, fd, chunk.handle),
             "cuMemImportFromShareableHandle");
  const CUdeviceptr at = range_.get() + index * chunk_size_;
  check_cuda(cuda::mapped_range::map(cu_, at, chunk_size_, chunk.handle.get(), chunk.mapping),
             "cuMemMap");
  CUmemAccessDesc rights{};
  rights.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  rights.location.id = context_.device();
  rights.flags = access == Access::read_only ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                             : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check_cuda(cu_.cuMemSetAccess(at, chunk_size_, &rights, 1), "cuMemSetAccess");
  chunks_.at(index) = std::move(chunk);
}

void cuda_range_mapper::unmap(std::size_t index) {
  context_scope scope(cu_, context_.get());
  // Destroyed here, mapping first, as the member order says.
  const mapped_chunk gone = std::exchange(chunks_.at(index), {});
}

}  // namespace gpumem::detail
