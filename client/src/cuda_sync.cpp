#include "cuda_sync.hpp"

#include <array>
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

stream_ops::stream_ops(Stream stream) : stream_(stream) {
  const cuda::driver_api& cu = cuda_driver();
  const CUcontext context = context_of(cu, stream);
  CUcontext current = nullptr;
  check_cuda(cu.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != context) {
    check_cuda(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent");
    previous_context_ = current;
    changed_ = true;
  }
  CUdevice device = 0;
  if (const CUresult status = cu.cuCtxGetDevice(&device); status != CUDA_SUCCESS) {
    if (changed_) cu.cuCtxSetCurrent(current);
    check_cuda(status, "cuCtxGetDevice");
  }
  device_ = static_cast<int>(device);
}

stream_ops::~stream_ops() {
  if (changed_) cuda_driver().cuCtxSetCurrent(static_cast<CUcontext>(previous_context_));
}

void stream_ops::wait_value(std::uint64_t address, std::uint32_t value, wait_kind kind) {
  check_cuda(cuda_driver().cuStreamWaitValue32(
                 stream_, address, value,
                 kind == wait_kind::equal ? CU_STREAM_WAIT_VALUE_EQ : CU_STREAM_WAIT_VALUE_GEQ),
             "cuStreamWaitValue32");
}

void stream_ops::write_value(std::uint64_t address, std::uint32_t value) {
  check_cuda(
      cuda_driver().cuStreamWriteValue32(stream_, address, value, CU_STREAM_WRITE_VALUE_DEFAULT),
      "cuStreamWriteValue32");
}

void stream_ops::write_values(std::span<const value_write> writes) {
  constexpr std::size_t kMostAtOnce = 8;
  if (writes.size() > kMostAtOnce) throw Error(errc::invalid_argument, "too many stream writes");
  std::array<CUstreamBatchMemOpParams, kMostAtOnce> operations{};
  for (std::size_t i = 0; i < writes.size(); ++i) {
    auto& write = operations[i].writeValue;
    write.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    write.address = writes[i].address;
    write.value = writes[i].value;
    write.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
  }
  check_cuda(cuda_driver().cuStreamBatchMemOp(stream_, static_cast<unsigned>(writes.size()),
                                              operations.data(), 0),
             "cuStreamBatchMemOp");
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
stream_ops::stream_ops(Stream stream) : stream_(stream) {
  no_cuda();
}
stream_ops::~stream_ops() = default;
void stream_ops::wait_value(std::uint64_t, std::uint32_t, wait_kind) {
  no_cuda();
}
void stream_ops::write_value(std::uint64_t, std::uint32_t) {
  no_cuda();
}
void stream_ops::write_values(std::span<const value_write>) {
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
