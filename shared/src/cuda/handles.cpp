#include "gpumem/shared/cuda/handles.hpp"

#include <cstdint>

namespace gpumem::cuda {

scoped_context::scoped_context(const driver_api& api, CUcontext context) noexcept : api_(api) {
  status_ = api_.cuCtxGetCurrent(&previous_);
  if (status_ == CUDA_SUCCESS && previous_ != context) {
    status_ = api_.cuCtxSetCurrent(context);
    changed_ = status_ == CUDA_SUCCESS;
  }
}

scoped_context::~scoped_context() {
  if (changed_) api_.cuCtxSetCurrent(previous_);
}

namespace detail {

// Results are ignored: a destructor has no one to tell, and what failed to be freed here the
// driver reclaims with the process.

void held_context::free(const driver_api& api) const noexcept {
  api.cuDevicePrimaryCtxRelease(device);
}

void held_stream::free(const driver_api& api) const noexcept {
  const scoped_context scope(api, context);
  if (scope.status() == CUDA_SUCCESS) api.cuStreamDestroy(handle);
}

void held_event::free(const driver_api& api) const noexcept {
  const scoped_context scope(api, context);
  if (scope.status() == CUDA_SUCCESS) api.cuEventDestroy(handle);
}

void held_pool::free(const driver_api& api) const noexcept {
  const scoped_context scope(api, context);
  if (scope.status() == CUDA_SUCCESS) api.cuMemPoolDestroy(handle);
}

void held_allocation::free(const driver_api& api) const noexcept {
  api.cuMemRelease(handle);
}

void held_range::free(const driver_api& api) const noexcept {
  api.cuMemAddressFree(handle, size);
}

void held_mapping::free(const driver_api& api) const noexcept {
  api.cuMemUnmap(handle, size);
}

void held_registration::free(const driver_api& api) const noexcept {
  api.cuMemHostUnregister(handle);
}

}  // namespace detail

CUresult primary_context::retain(const driver_api& api, CUdevice device,
                                 primary_context& out) noexcept {
  CUcontext context = nullptr;
  const CUresult status = api.cuDevicePrimaryCtxRetain(&context, device);
  if (status == CUDA_SUCCESS) out = primary_context(api, device, context);
  return status;
}

CUresult stream::create(const driver_api& api, CUcontext context, unsigned flags,
                        stream& out) noexcept {
  const scoped_context scope(api, context);
  if (scope.status() != CUDA_SUCCESS) return scope.status();
  CUstream handle = nullptr;
  const CUresult status = api.cuStreamCreate(&handle, flags);
  if (status == CUDA_SUCCESS) out = stream(api, handle, context);
  return status;
}

CUresult event::create(const driver_api& api, CUcontext context, unsigned flags,
                       event& out) noexcept {
  const scoped_context scope(api, context);
  if (scope.status() != CUDA_SUCCESS) return scope.status();
  CUevent handle = nullptr;
  const CUresult status = api.cuEventCreate(&handle, flags);
  if (status == CUDA_SUCCESS) out = event(api, handle, context);
  return status;
}

CUresult event::open_ipc(const driver_api& api, CUcontext context, const CUipcEventHandle& handle,
                         event& out) noexcept {
  const scoped_context scope(api, context);
  if (scope.status() != CUDA_SUCCESS) return scope.status();
  CUevent opened = nullptr;
  const CUresult status = api.cuIpcOpenEventHandle(&opened, handle);
  if (status == CUDA_SUCCESS) out = event(api, opened, context);
  return status;
}

CUresult memory_pool::create(const driver_api& api, CUcontext context, const CUmemPoolProps& props,
                             memory_pool& out) noexcept {
  const scoped_context scope(api, context);
  if (scope.status() != CUDA_SUCCESS) return scope.status();
  CUmemoryPool handle = nullptr;
  const CUresult status = api.cuMemPoolCreate(&handle, &props);
  if (status == CUDA_SUCCESS) out = memory_pool(api, handle, context);
  return status;
}

CUresult memory_pool::import_fd(const driver_api& api, CUcontext context, int fd,
                                memory_pool& out) noexcept {
  const scoped_context scope(api, context);
  if (scope.status() != CUDA_SUCCESS) return scope.status();
  CUmemoryPool handle = nullptr;
  const CUresult status = api.cuMemPoolImportFromShareableHandle(
      &handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (status == CUDA_SUCCESS) out = memory_pool(api, handle, context);
  return status;
}

CUresult allocation_handle::create(const driver_api& api, std::size_t size,
                                   const CUmemAllocationProp& prop,
                                   allocation_handle& out) noexcept {
  CUmemGenericAllocationHandle handle = 0;
  const CUresult status = api.cuMemCreate(&handle, size, &prop, 0);
  if (status == CUDA_SUCCESS) out = allocation_handle(api, handle);
  return status;
}

CUresult allocation_handle::import_fd(const driver_api& api, int fd,
                                      allocation_handle& out) noexcept {
  CUmemGenericAllocationHandle handle = 0;
  const CUresult status = api.cuMemImportFromShareableHandle(
      &handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (status == CUDA_SUCCESS) out = allocation_handle(api, handle);
  return status;
}

CUresult address_range::reserve(const driver_api& api, std::size_t size, std::size_t alignment,
                                address_range& out) noexcept {
  CUdeviceptr base = 0;
  const CUresult status = api.cuMemAddressReserve(&base, size, alignment, 0, 0);
  if (status == CUDA_SUCCESS) out = address_range(api, base, size);
  return status;
}

CUresult mapped_range::map(const driver_api& api, CUdeviceptr at, std::size_t size,
                           CUmemGenericAllocationHandle allocation, mapped_range& out) noexcept {
  const CUresult status = api.cuMemMap(at, size, 0, allocation, 0);
  if (status == CUDA_SUCCESS) out = mapped_range(api, at, size);
  return status;
}

CUresult host_registration::register_range(const driver_api& api, void* start, std::size_t size,
                                           unsigned flags, host_registration& out) noexcept {
  const CUresult status = api.cuMemHostRegister(start, size, flags);
  if (status == CUDA_SUCCESS) out = host_registration(api, start);
  return status;
}

}  // namespace gpumem::cuda
