#include "memory/cuda_reservation.hpp"

#include <fmt/format.h>

#include <atomic>

#include "request_error.hpp"

namespace gpumem::daemon {

using cuda::check;

namespace {
std::atomic<std::uint64_t> next_chunk_id{1};
}

cuda_reservation::cuda_reservation(const cuda::driver_api& driver, std::int32_t device,
                                   std::uint64_t max_size)
    : cu_(driver), device_(device) {
  int devices = 0;
  check(cu_.cuDeviceGetCount(&devices), "cuDeviceGetCount");
  if (device < 0 || device >= devices) {
    throw request_error(proto::errc::no_such_device,
                        fmt::format("no CUDA device {} ({} here)", device, devices));
  }
  check(cu_.cuDeviceGet(&handle_, device), "cuDeviceGet");
  check(cu_.cuDevicePrimaryCtxRetain(&context_, handle_), "cuDevicePrimaryCtxRetain");
  properties_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  properties_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  properties_.location.id = device;
  properties_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  std::size_t granularity = 0;
  check(cu_.cuMemGetAllocationGranularity(&granularity, &properties_,
                                          CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        "cuMemGetAllocationGranularity");
  chunk_size_ = granularity;
  max_size_ = (max_size + granularity - 1) / granularity * granularity;
}

cuda_reservation::~cuda_reservation() {
  cu_.cuCtxSetCurrent(context_);
  while (!chunks_.empty()) release_last();
  cu_.cuDevicePrimaryCtxRelease(handle_);
}

reservation::chunk cuda_reservation::chunk_at(std::size_t index) const {
  const physical& each = chunks_.at(index);
  return {each.id, each.exported.get()};
}

void cuda_reservation::resize(std::size_t chunks) {
  if (chunks * chunk_size_ > max_size_) {
    throw request_error(
        proto::errc::invalid_argument,
        fmt::format("{} bytes exceed the reservation's {}", chunks * chunk_size_, max_size_));
  }
  check(cu_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  const std::size_t before = chunks_.size();
  while (chunks_.size() < chunks) {
    CUmemGenericAllocationHandle handle = 0;
    const CUresult created = cu_.cuMemCreate(&handle, chunk_size_, &properties_, 0);
    int fd = -1;
    const CUresult exported = created == CUDA_SUCCESS
                                  ? cu_.cuMemExportToShareableHandle(
                                        &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
                                  : created;
    if (exported != CUDA_SUCCESS) {
      if (created == CUDA_SUCCESS) cu_.cuMemRelease(handle);
      while (chunks_.size() > before) release_last();  // all or nothing
      if (exported == CUDA_ERROR_OUT_OF_MEMORY) {
        throw request_error(proto::errc::out_of_memory,
                            fmt::format("device {} has no room for {} more bytes", device_,
                                        (chunks - before) * chunk_size_));
      }
      check(exported, "cuMemCreate/cuMemExportToShareableHandle");
    }
    chunks_.push_back({next_chunk_id++, handle, unique_fd(fd)});
  }
  while (chunks_.size() > chunks) release_last();
}

void cuda_reservation::release_last() noexcept {
  cu_.cuMemRelease(chunks_.back().handle);
  chunks_.pop_back();
}

reservation_maker cuda_reservation_maker(const cuda::driver_api& driver) {
  return [&driver](std::int32_t device, std::uint64_t max_size) -> std::unique_ptr<reservation> {
    return std::make_unique<cuda_reservation>(driver, device, max_size);
  };
}

}  // namespace gpumem::daemon
