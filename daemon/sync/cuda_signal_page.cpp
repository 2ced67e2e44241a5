#include "sync/cuda_signal_page.hpp"

#include "cuda_device.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using cuda::check;

cuda_signal_page::cuda_signal_page(const cuda::driver_api& driver, std::int32_t device)
    : cu_(driver), size_(sync::kSignalPageSize) {
  context_ = retain_device(cu_, device);
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  CUmemAllocationProp properties{};
  properties.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  properties.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  properties.location.id = device;
  properties.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  check(cuda::allocation_handle::create(cu_, size_, properties, handle_), "cuMemCreate");
  int fd = -1;
  check(cu_.cuMemExportToShareableHandle(&fd, handle_.get(),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "cuMemExportToShareableHandle");
  exported_.reset(fd);
  map_into_daemon(device);
  check(cu_.cuMemsetD32(range_.get(), 0, size_ / sizeof(std::uint32_t)), "cuMemsetD32");
}

cuda_signal_page::cuda_signal_page(const cuda::driver_api& driver, std::int32_t device,
                                   unique_fd exported)
    : cu_(driver), size_(sync::kSignalPageSize), exported_(std::move(exported)) {
  context_ = retain_device(cu_, device);
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  check(cuda::allocation_handle::import_fd(cu_, exported_.get(), handle_),
        "cuMemImportFromShareableHandle(signal page)");
  map_into_daemon(device);
}

void cuda_signal_page::map_into_daemon(std::int32_t device) {
  check(cuda::address_range::reserve(cu_, size_, size_, range_), "cuMemAddressReserve");
  check(cuda::mapped_range::map(cu_, range_.get(), size_, handle_.get(), mapped_), "cuMemMap");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(cu_.cuMemSetAccess(range_.get(), size_, &access, 1), "cuMemSetAccess");
  check(cuda::stream::create(cu_, context_.get(), CU_STREAM_NON_BLOCKING, repairs_),
        "cuStreamCreate");
}

CUdeviceptr cuda_signal_page::address(std::uint32_t cell, std::size_t offset) const {
  if (cell >= sync::kCellCount || offset + sizeof(std::uint32_t) > sync::kSignalCellSize) {
    throw request_error(proto::errc::internal, "signal page word out of range");
  }
  return range_.get() + cell * sync::kSignalCellSize + offset;
}

std::uint32_t cuda_signal_page::read(std::uint32_t cell, std::size_t offset) {
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  std::uint32_t value = 0;
  check(cu_.cuMemcpyDtoH(&value, address(cell, offset), sizeof value), "cuMemcpyDtoH");
  return value;
}

void cuda_signal_page::write(std::uint32_t cell, std::size_t offset, std::uint32_t value) {
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  check(cu_.cuStreamWriteValue32(repairs_.get(), address(cell, offset), value, 0),
        "cuStreamWriteValue32");
}

void cuda_signal_page::pass_turn(std::uint32_t cell, std::size_t offset, std::uint32_t turn,
                                 std::uint32_t next_turn) {
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  const CUdeviceptr word = address(cell, offset);
  check(cu_.cuStreamWaitValue32(repairs_.get(), word, turn, CU_STREAM_WAIT_VALUE_EQ),
        "cuStreamWaitValue32");
  check(cu_.cuStreamWriteValue32(repairs_.get(), word, next_turn, 0), "cuStreamWriteValue32");
}

void cuda_signal_page::clear(std::uint32_t cell) {
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  check(cu_.cuMemsetD32(address(cell, 0), 0, sync::kSignalCellSize / sizeof(std::uint32_t)),
        "cuMemsetD32");
}

signal_page_maker cuda_signal_page_maker(const cuda::driver_api& driver) {
  return [&driver](std::int32_t device) -> std::unique_ptr<signal_page> {
    return std::make_unique<cuda_signal_page>(driver, device);
  };
}

signal_page_adopter cuda_signal_page_adopter(const cuda::driver_api& driver) {
  return [&driver](std::int32_t device, unique_fd exported) -> std::unique_ptr<signal_page> {
    return std::make_unique<cuda_signal_page>(driver, device, std::move(exported));
  };
}

}  // namespace gpumem::daemon
