#include "cuda_sync.hpp"

#ifdef GPUMEM_WITH_CUDA
#include "cuda_context.hpp"
#endif

namespace gpumem::detail::cuda_sync {

#ifdef GPUMEM_WITH_CUDA

namespace {

/// The stream's context, or the caller's current one for the default stream.
CUcontext context_of(const cuda::driver_api& cu, Stream stream) {
  CUcontext context = nullptr;
  if (stream != nullptr) {
    check_cuda(cu.cuStreamGetCtx(stream, &context), "cuStreamGetCtx");
  } else {
    check_cuda(cu.cuCtxGetCurrent(&context), "cuCtxGetCurrent");
    if (context == nullptr) {
      CUdevice first = 0;
      check_cuda(cu.cuDeviceGet(&first, 0), "cuDeviceGet");
      check_cuda(cu.cuDevicePrimaryCtxRetain(&context, first), "cuDevicePrimaryCtxRetain");
    }
  }
  return context;
}

}  // namespace

std::uint64_t map_signal_page(int fd, int device, std::size_t size) {
  const cuda::driver_api& cu = cuda_driver();
  CUdevice handle_device = 0;
  CUcontext context = nullptr;
  check_cuda(cu.cuDeviceGet(&handle_device, device), "cuDeviceGet");
  check_cuda(cu.cuDevicePrimaryCtxRetain(&context, handle_device), "cuDevicePrimaryCtxRetain");
  context_scope scope(cu, context);
  CUmemGenericAllocationHandle chunk = 0;
  check_cuda(cu.cuMemImportFromShareableHandle(&chunk, reinterpret_cast<void*>(std::intptr_t{fd}),
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
             "cuMemImportFromShareableHandle(signal page)");
  CUdeviceptr base = 0;
  CUresult status = cu.cuMemAddressReserve(&base, size, size, 0, 0);
  if (status == CUDA_SUCCESS) status = cu.cuMemMap(base, size, 0, chunk, 0);
  // The mapping keeps the memory; the handle is not needed any more.
  cu.cuMemRelease(chunk);
  if (status == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    status = cu.cuMemSetAccess(base, size, &access, 1);
  }
  if (status != CUDA_SUCCESS && base != 0) {
    cu.cuMemUnmap(base, size);
    cu.cuMemAddressFree(base, size);
  }
  check_cuda(status, "mapping the signal page");
  return base;
}

void unmap_signal_page(std::uint64_t address, std::size_t size) noexcept {
  const cuda::driver_api* cu = cuda::driver();
  if (cu == nullptr) return;
  cu->cuMemUnmap(address, size);
  cu->cuMemAddressFree(address, size);
}

std::uint64_t register_host_page(void* page, std::size_t size) {
  const cuda::driver_api& cu = cuda_driver();
  context_scope scope(cu, context_of(cu, nullptr));
  check_cuda(
      cu.cuMemHostRegister(page, size, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE),
      "cuMemHostRegister(lock page)");
  CUdeviceptr address = 0;
  check_cuda(cu.cuMemHostGetDevicePointer(&address, page, 0), "cuMemHostGetDevicePointer");
  return address;
}

void unregister_host_page(void* page) noexcept {
  if (const cuda::driver_api* cu = cuda::driver()) cu->cuMemHostUnregister(page);
}

int device_of(Stream stream) {
  const cuda::driver_api& cu = cuda_driver();
  context_scope scope(cu, context_of(cu, stream));
  CUdevice device = 0;
  check_cuda(cu.cuCtxGetDevice(&device), "cuCtxGetDevice");
  return static_cast<int>(device);
}

void wait_value(Stream stream, std::uint64_t address, std::uint32_t value, wait_kind kind) {
  const cuda::driver_api& cu = cuda_driver();
  context_scope scope(cu, context_of(cu, stream));
  check_cuda(cu.cuStreamWaitValue32(
                 stream, address, value,
                 kind == wait_kind::equal ? CU_STREAM_WAIT_VALUE_EQ : CU_STREAM_WAIT_VALUE_GEQ),
             "cuStreamWaitValue32");
}

void write_value(Stream stream, std::uint64_t address, std::uint32_t value) {
  const cuda::driver_api& cu = cuda_driver();
  context_scope scope(cu, context_of(cu, stream));
  check_cuda(cu.cuStreamWriteValue32(stream, address, value, CU_STREAM_WRITE_VALUE_DEFAULT),
             "cuStreamWriteValue32");
}

#else

namespace {
[[noreturn]] void no_cuda() {
  throw Error(errc::not_supported,
              "this libgpumem was built without CUDA: stream-ordered and device forms are "
              "unavailable");
}
}  // namespace

std::uint64_t map_signal_page(int, int, std::size_t) {
  no_cuda();
}
void unmap_signal_page(std::uint64_t, std::size_t) noexcept {}
std::uint64_t register_host_page(void*, std::size_t) {
  no_cuda();
}
void unregister_host_page(void*) noexcept {}
int device_of(Stream) {
  no_cuda();
}
void wait_value(Stream, std::uint64_t, std::uint32_t, wait_kind) {
  no_cuda();
}
void write_value(Stream, std::uint64_t, std::uint32_t) {
  no_cuda();
}

#endif

}  // namespace gpumem::detail::cuda_sync
