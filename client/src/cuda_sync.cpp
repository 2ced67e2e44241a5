#include "cuda_sync.hpp"

#include <utility>

#ifdef GPUMEM_WITH_CUDA
#include "cuda_context.hpp"
#endif

namespace gpumem::detail::cuda_sync {

#ifdef GPUMEM_WITH_CUDA

/// Declared in the order they are made, so that they are undone in reverse.
struct device_mapping::owners {
  cuda::primary_context context;  ///< signal pages: their device's, held while mapped
  cuda::address_range range;
  cuda::mapped_range mapped;
  cuda::host_registration registration;
};

namespace {

/// The stream's context, or the caller's current one for the default stream. A caller with
/// none current gets device 0's primary context, retained once for the life of the process:
/// the work queued there must not lose its context when the call returns.
CUcontext context_of(const cuda::driver_api& cu, Stream stream) {
  CUcontext context = nullptr;
  if (stream != nullptr) {
    check_cuda(cu.cuStreamGetCtx(stream, &context), "cuStreamGetCtx");
    return context;
  }
  check_cuda(cu.cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  if (context != nullptr) return context;
  static const cuda::primary_context first_device = [&cu] {
    CUdevice first = 0;
    check_cuda(cu.cuDeviceGet(&first, 0), "cuDeviceGet");
    cuda::primary_context retained;
    check_cuda(cuda::primary_context::retain(cu, first, retained), "retaining the primary context");
    return retained;
  }();
  return first_device.get();
}

}  // namespace

device_mapping map_signal_page(int fd, int device, std::size_t size) {
  const cuda::driver_api& cu = cuda_driver();
  CUdevice handle_device = 0;
  check_cuda(cu.cuDeviceGet(&handle_device, device), "cuDeviceGet");
  auto held = std::make_unique<device_mapping::owners>();
  check_cuda(cuda::primary_context::retain(cu, handle_device, held->context),
             "retaining the primary context");
  context_scope scope(cu, held->context.get());
  // Released on return: the mapping keeps the memory.
  cuda::allocation_handle chunk;
  check_cuda(cuda::allocation_handle::import_fd(cu, fd, chunk),
             "cuMemImportFromShareableHandle(signal page)");
  check_cuda(cuda::address_range::reserve(cu, size, size, held->range), "cuMemAddressReserve");
  check_cuda(cuda::mapped_range::map(cu, held->range.get(), size, chunk.get(), held->mapped),
             "cuMemMap(signal page)");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check_cuda(cu.cuMemSetAccess(held->range.get(), size, &access, 1), "cuMemSetAccess(signal page)");
  const CUdeviceptr address = held->range.get();
  return {address, std::move(held)};
}

device_mapping register_host_page(void* page, std::size_t size) {
  const cuda::driver_api& cu = cuda_driver();
  context_scope scope(cu, context_of(cu, nullptr));
  auto held = std::make_unique<device_mapping::owners>();
  check_cuda(cuda::host_registration::register_range(
                 cu, page, size, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE,
                 held->registration),
             "cuMemHostRegister(lock page)");
  CUdeviceptr address = 0;
  check_cuda(cu.cuMemHostGetDevicePointer(&address, page, 0), "cuMemHostGetDevicePointer");
  return {address, std::move(held)};
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

/// Built without CUDA nothing is ever mapped.
struct device_mapping::owners {};

namespace {
[[noreturn]] void no_cuda() {
  throw Error(errc::not_supported,
              "this libgpumem was built without CUDA: stream-ordered and device forms are "
              "unavailable");
}
}  // namespace

device_mapping map_signal_page(int, int, std::size_t) {
  no_cuda();
}
device_mapping register_host_page(void*, std::size_t) {
  no_cuda();
}
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

device_mapping::device_mapping() noexcept = default;
device_mapping::device_mapping(std::uint64_t address, std::unique_ptr<owners> held) noexcept
    : address_(address), owners_(std::move(held)) {}
device_mapping::device_mapping(device_mapping&& other) noexcept
    : address_(std::exchange(other.address_, 0)), owners_(std::move(other.owners_)) {}
device_mapping& device_mapping::operator=(device_mapping&& other) noexcept {
  address_ = std::exchange(other.address_, 0);
  owners_ = std::move(other.owners_);
  return *this;
}
device_mapping::~device_mapping() = default;

}  // namespace gpumem::detail::cuda_sync
