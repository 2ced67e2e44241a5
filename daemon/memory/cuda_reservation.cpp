#include "memory/cuda_reservation.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "cuda_device.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using cuda::check;

void cuda_reservation::enter_device() {
  context_ = retain_device(cu_, device_);
  properties_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  properties_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  properties_.location.id = device_;
  properties_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

cuda_reservation::cuda_reservation(const cuda::driver_api& driver, std::int32_t device,
                                   std::uint64_t max_size, std::uint64_t chunk_size,
                                   std::vector<adopted_chunk> chunks)
    : cu_(driver), device_(device), chunk_size_(chunk_size), max_size_(max_size) {
  enter_device();
  for (adopted_chunk& each : chunks) {
    chunk_ids_from(each.id + 1);
    physical kept;
    kept.id = each.id;
    kept.exported = std::move(each.fd);
    chunks_.push_back(std::move(kept));
  }
}

cuda_reservation::cuda_reservation(const cuda::driver_api& driver, std::int32_t device,
                                   std::uint64_t max_size, std::uint64_t chunk_size)
    : cu_(driver), device_(device) {
  enter_device();
  std::size_t granularity = 0;
  check(cu_.cuMemGetAllocationGranularity(&granularity, &properties_,
                                          CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        "cuMemGetAllocationGranularity");
  if (chunk_size != 0) {
    if (chunk_size % granularity != 0) {
      throw request_error(
          proto::errc::internal,
          fmt::format("chunks of {} bytes are not whole {}-byte granules of device {}", chunk_size,
                      granularity, device));
    }
    chunk_size_ = chunk_size;
  } else {
    chunk_size_ = granularity;
    while (whole_chunks(max_size, chunk_size_) > kMostChunks) chunk_size_ *= 2;
  }
  max_size_ = whole_chunk_bytes(max_size, chunk_size_);
}

reservation::chunk cuda_reservation::chunk_at(std::size_t index) const {
  const physical& each = chunks_.at(index);
  return {each.id, each.exported.get(), each.exported.get()};
}

void cuda_reservation::resize(std::size_t chunks) {
  if (chunks * chunk_size_ > max_size_) {
    throw request_error(
        proto::errc::invalid_argument,
        fmt::format("{} bytes exceed the reservation's {}", chunks * chunk_size_, max_size_));
  }
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  const std::size_t before = chunks_.size();
  while (chunks_.size() < chunks) {
    physical made;
    CUresult status = cuda::allocation_handle::create(cu_, chunk_size_, properties_, made.handle);
    int fd = -1;
    if (status == CUDA_SUCCESS) {
      status = cu_.cuMemExportToShareableHandle(&fd, made.handle.get(),
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    }
    if (status != CUDA_SUCCESS) {
      // All or nothing: the chunks made by this call go again.
      chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(before), chunks_.end());
      if (status == CUDA_ERROR_OUT_OF_MEMORY) {
        throw request_error(proto::errc::out_of_memory,
                            fmt::format("device {} has no room for {} more bytes", device_,
                                        (chunks - before) * chunk_size_));
      }
      check(status, "cuMemCreate/cuMemExportToShareableHandle");
    }
    made.id = new_chunk_id();
    made.exported.reset(fd);
    chunks_.push_back(std::move(made));
  }
  chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(chunks), chunks_.end());
}

cuda_reservation::daemon_view cuda_reservation::map_here() const {
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  daemon_view view;
  const std::size_t bytes = committed();
  check(cuda::address_range::reserve(cu_, bytes, chunk_size_, view.range), "cuMemAddressReserve");
  for (std::size_t index = 0; index < chunks_.size(); ++index) {
    CUmemGenericAllocationHandle handle = chunks_[index].handle.get();
    if (!chunks_[index].handle) {  // adopted: the kept fd is all there is
      cuda::allocation_handle imported;
      check(cuda::allocation_handle::import_fd(cu_, chunks_[index].exported.get(), imported),
            "cuMemImportFromShareableHandle");
      handle = imported.get();
      view.imported.push_back(std::move(imported));
    }
    cuda::mapped_range mapped;
    check(cuda::mapped_range::map(cu_, view.range.get() + index * chunk_size_, chunk_size_, handle,
                                  mapped),
          "cuMemMap");
    view.mappings.push_back(std::move(mapped));
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (bytes != 0) check(cu_.cuMemSetAccess(view.range.get(), bytes, &access, 1), "cuMemSetAccess");
  return view;
}

namespace {
/// Pages pinned in a device's primary context, retained here while they are pinned: the
/// registration belongs to that context, which must still be there to undo it.
class cuda_pinning final : public host_pinning {
 public:
  cuda_pinning(const cuda::driver_api& cu, std::int32_t device)
      : cu_(cu), context_(retain_device(cu, device)) {}
  ~cuda_pinning() override { cu_.cuCtxSetCurrent(context_.get()); }  // before the unregistering
  cuda::host_registration& registration() noexcept { return registration_; }

 private:
  const cuda::driver_api& cu_;
  cuda::primary_context context_;
  cuda::host_registration registration_;  ///< last: undone first, in the context set above
};
}  // namespace

// Pageable copies run at a fifth of the rate (CUDA-FACTS: 10 against 55 GB/s). The pinning
// stays with the copy, so that the wake, and the next sleep that reuses the copy, skip it.
void cuda_reservation::pin(sleep_copy& host) const {
  if (host.pinned != nullptr || host.bytes == 0) return;
  auto pinning = std::make_unique<cuda_pinning>(cu_, device_);
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  check(cuda::host_registration::register_range(cu_, host.data(), host.bytes, 0,
                                                pinning->registration()),
        "cuMemHostRegister");
  host.pinned = std::move(pinning);
}

void cuda_reservation::copy_out(sleep_copy& host) const {
  transfer(host, direction::to_host);
}

void cuda_reservation::copy_in(sleep_copy& host) {
  transfer(host, direction::to_device);
}

void cuda_reservation::transfer(sleep_copy& host, direction way) const {
  const std::size_t bytes = committed();
  if (bytes == 0) return;
  const auto started = std::chrono::steady_clock::now();
  const daemon_view view = map_here();
  const auto mapped = std::chrono::steady_clock::now();
  pin(host);
  const auto pinned = std::chrono::steady_clock::now();
  if (way == direction::to_host) {
    check(cu_.cuMemcpyDtoH(host.data(), view.range.get(), bytes), "cuMemcpyDtoH");
  } else {
    check(cu_.cuMemcpyHtoD(view.range.get(), host.data(), bytes), "cuMemcpyHtoD");
    check(cu_.cuStreamSynchronize(CU_STREAM_LEGACY), "cuStreamSynchronize");
  }
  const auto copied = std::chrono::steady_clock::now();
  using ms = std::chrono::duration<double, std::milli>;
  spdlog::debug(
      "copy {} of {} bytes: mapped in {:.1f} ms, pinned in {:.1f} ms, copied in "
      "{:.1f} ms",
      way == direction::to_host ? "out" : "in", bytes, ms(mapped - started).count(),
      ms(pinned - mapped).count(), ms(copied - pinned).count());
}

void cuda_reservation::clear() {
  const std::size_t bytes = committed();
  if (bytes == 0) return;
  const daemon_view view = map_here();
  check(cu_.cuMemsetD8(view.range.get(), 0, bytes), "cuMemsetD8");
  // The null stream the memset ran on, not the whole context: every other stream of the
  // daemon is non-blocking, and some wait on clients (a release on a client's event, a lock
  // turn for a dead holder), which cuCtxSynchronize would wait for too.
  check(cu_.cuStreamSynchronize(CU_STREAM_LEGACY), "cuStreamSynchronize");
}

reservation_maker cuda_reservation_maker(const cuda::driver_api& driver) {
  return [&driver](std::int32_t device, std::uint64_t max_size,
                   std::uint64_t chunk_size) -> std::unique_ptr<reservation> {
    return std::make_unique<cuda_reservation>(driver, device, max_size, chunk_size);
  };
}

reservation_adopter cuda_reservation_adopter(const cuda::driver_api& driver) {
  return [&driver](std::int32_t device, std::uint64_t max_size, std::uint64_t chunk_size,
                   std::vector<adopted_chunk> chunks) -> std::unique_ptr<reservation> {
    return std::make_unique<cuda_reservation>(driver, device, max_size, chunk_size,
                                              std::move(chunks));
  };
}

}  // namespace gpumem::daemon
