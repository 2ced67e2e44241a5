#include "memory/cuda_pool.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "request_error.hpp"

namespace gpumem::daemon {

using cuda::check;

namespace {
CUmemAccessDesc read_write_on(CUdevice device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}
}  // namespace

cuda_pool::cuda_pool(std::uint32_t id, pool_config config, const cuda::driver_api& driver,
                     family_room& room)
    : pool(id, std::move(config)),
      cu_(driver),
      spares_([this](std::uint64_t size) { return allocate_exported(size); },
              [this](const exported_block& block) {
                cu_.cuCtxSetCurrent(context_.get());
                cu_.cuMemFreeAsync(block.pointer, allocation_stream_.get());
              },
              room) {
  const auto& settings = this->config();
  int devices = 0;
  check(cu_.cuDeviceGetCount(&devices), "cuDeviceGetCount");
  if (settings.device >= devices) {
    throw config_error(fmt::format("pool '{}': device {} does not exist ({} CUDA device(s))",
                                   settings.name, settings.device, devices));
  }
  CUdevice device = 0;
  check(cu_.cuDeviceGet(&device, settings.device), "cuDeviceGet");
  check(cuda::primary_context::retain(cu_, device, context_), "retaining the primary context");
  enter();

  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  props.maxSize = settings.size;
  check(cuda::memory_pool::create(cu_, context_.get(), props, pool_), "cuMemPoolCreate");
  cuuint64_t threshold = settings.release_threshold;
  check(cu_.cuMemPoolSetAttribute(pool_.get(), CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
        "cuMemPoolSetAttribute(release threshold)");
  int no = 0;
  check(cu_.cuMemPoolSetAttribute(pool_.get(), CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                                  &no),
        "cuMemPoolSetAttribute(internal dependencies)");
  for (const auto peer : settings.peer_access) {
    CUdevice peer_device = 0;
    int can_access = 0;
    if (peer >= devices || cu_.cuDeviceGet(&peer_device, peer) != CUDA_SUCCESS ||
        cu_.cuDeviceCanAccessPeer(&can_access, peer_device, device) != CUDA_SUCCESS ||
        !can_access) {
      throw config_error(fmt::format("pool '{}': device {} cannot access device {}", settings.name,
                                     peer, settings.device));
    }
    const CUmemAccessDesc access = read_write_on(peer_device);
    check(cu_.cuMemPoolSetAccess(pool_.get(), &access, 1), "cuMemPoolSetAccess(peer)");
  }
  // Pointer export fails until the pool itself has been exported once.
  int fd = -1;
  check(cu_.cuMemPoolExportToShareableHandle(&fd, pool_.get(),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "cuMemPoolExportToShareableHandle");
  exported_.reset(fd);
  check(cuda::stream::create(cu_, context_.get(), CU_STREAM_NON_BLOCKING, allocation_stream_),
        "cuStreamCreate");
  check(cuda::stream::create(cu_, context_.get(), CU_STREAM_NON_BLOCKING, release_stream_),
        "cuStreamCreate");
  released_.emplace(cu_, context_.get(), [this](std::uint64_t size, const exported_block& block) {
    return spares_.offer(size, block);
  });
  check(cuda::event::create(cu_, context_.get(), CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS,
                            ready_),
        "cuEventCreate(interprocess)");
  check(cu_.cuEventRecord(ready_.get(), allocation_stream_.get()), "cuEventRecord");
  check(cu_.cuIpcGetEventHandle(&ready_handle_, ready_.get()), "cuIpcGetEventHandle");
  spdlog::info("pool '{}': CUDA device {}, limit {} bytes, peers {}", settings.name,
               settings.device, settings.size, settings.peer_access.size());
}

cuda_pool::~cuda_pool() {
  // Best effort, no throwing: the process is going away and the driver reclaims the rest.
  // The frees queued here finish before the members (streams, pool, context) are freed.
  spares_.stop();
  drop_spares();
  if (cu_.cuCtxSetCurrent(context_.get()) != CUDA_SUCCESS) return;
  released_->free_all(release_stream_.get());
  cu_.cuStreamSynchronize(allocation_stream_.get());
  cu_.cuStreamSynchronize(release_stream_.get());
}

void cuda_pool::enter() const {
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
}

std::optional<ipc_handle> cuda_pool::ready_event() const {
  static_assert(sizeof(ipc_handle) == sizeof(ready_handle_));
  ipc_handle handle;
  std::memcpy(handle.data(), &ready_handle_, sizeof ready_handle_);
  return handle;
}

void cuda_pool::finish_allocations() const {
  enter();
  check(cu_.cuStreamSynchronize(allocation_stream_.get()), "cuStreamSynchronize(allocations)");
}

std::optional<exported_block> cuda_pool::allocate_exported(std::uint64_t size) const {
  enter();
  exported_block block;
  // Freed, not offered as spares: this runs on the spares' worker too, where the room may not be
  // counted (family_room), and an allocation being made wants the memory back in the pool.
  log_failed(released_->free_landed(allocation_stream_.get()));
  const CUresult status =
      cu_.cuMemAllocFromPoolAsync(&block.pointer, size, pool_.get(), allocation_stream_.get());
  if (status == CUDA_ERROR_OUT_OF_MEMORY) return std::nullopt;
  check(status, "cuMemAllocFromPoolAsync");
  if (const CUresult exported = cu_.cuMemPoolExportPointer(&block.data, block.pointer);
      exported != CUDA_SUCCESS) {
    cu_.cuMemFreeAsync(block.pointer, allocation_stream_.get());
    check(exported, "cuMemPoolExportPointer");
  }
  // Waiting on the ready event after a grant orders the waiter after this allocation. Records
  // from the spares' thread land on the same stream, each after its own allocation, so the
  // latest record always covers every block handed out before it.
  if (const CUresult recorded = cu_.cuEventRecord(ready_.get(), allocation_stream_.get());
      recorded != CUDA_SUCCESS) {
    cu_.cuMemFreeAsync(block.pointer, allocation_stream_.get());  // handed to nobody
    check(recorded, "cuEventRecord(ready)");
  }
  return block;
}

std::optional<placement> cuda_pool::do_allocate(std::uint64_t size) {
  // The memory book has made room in the configured pool's size (dropping this instance's
  // spares that were in the way); the driver may still be out of device memory.
  std::optional<exported_block> block = spares_.take(size);
  if (!block) {
    // A block of this size released moments ago may be done with by now: taken back as a
    // spare, it is handed out at the cost of a query, not of the making.
    enter();
    log_failed(released_->reuse_or_free_landed(allocation_stream_.get()));
    block = spares_.take(size);
  }
  const bool from_spare = block.has_value();
  if (!from_spare) {
    const auto start = std::chrono::steady_clock::now();
    block = allocate_exported(size);
    if (!block && spares_.bytes() > 0) {
      drop_spares();
      block = allocate_exported(size);
    }
    if (!block) return std::nullopt;
    // A request that finds no block ready pays for the making; how often, and what it costs,
    // is what decides whether the spares keep allocations off the driver.
    spdlog::debug("pool '{}': no {}-byte block ready: made on the request path in {} us",
                  config().name, size,
                  std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count());
  }
  try {
    exports_.emplace(block->pointer, block->data);
  } catch (...) {
    // Handed to nobody: back to the pool, in the order of the stream that made it. A block
    // from the spares was taken with another device's context perhaps current.
    enter();
    cu_.cuMemFreeAsync(block->pointer, allocation_stream_.get());
    throw;
  }
  ++(from_spare ? served_ : made_on_request_);
  note_size_to_want(size, from_spare);
  return placement{block->pointer, size};
}

void cuda_pool::note_size_to_want(std::uint64_t size, bool from_spare) noexcept {
  // Whatever this size's next request needs is made while this one's reply travels, and asked
  // for only once the reply is out: want() takes the lock and reads the lists that the spares'
  // worker wrote last, from another core. A size served from a spare is asked for first, so
  // that a size new in this turn cannot take its place among the sizes kept.
  if (size > cuda_spares::kMaxBlockSize || sizes_to_want_.size() == cuda_spares::kMaxSizes ||
      std::find(sizes_to_want_.begin(), sizes_to_want_.end(), size) != sizes_to_want_.end()) {
    return;
  }
  sizes_to_want_.insert(from_spare ? sizes_to_want_.begin() : sizes_to_want_.end(), size);
}

void cuda_pool::start_deferred_work() noexcept {
  // Blocks released and done with become spares first, so that the worker does not make what
  // they stand for.
  if (cu_.cuCtxSetCurrent(context_.get()) == CUDA_SUCCESS) {
    log_failed(released_->reuse_or_free_landed(allocation_stream_.get()));
  }
  for (const std::uint64_t size : sizes_to_want_) spares_.want(size);
  sizes_to_want_.clear();
  spares_.start_wanted();
}

spare_use cuda_pool::spares() const {
  const cuda_spares::origins origins = spares_.counted();
  return {.bytes = spares_.bytes(),
          .ready_bytes = spares_.ready_bytes(),
          .served = served_,
          .missed = made_on_request_,
          .made = origins.made,
          .reused = origins.reused};
}

void cuda_pool::drop_spares() noexcept {
  // Uncounted whether or not they can be freed: the driver takes back what a dead context held.
  const auto blocks = spares_.drain();
  if (cu_.cuCtxSetCurrent(context_.get()) != CUDA_SUCCESS) return;
  // A spare was never handed out, or its holders were done with it when it became one, so its
  // free waits for nobody's release; on the allocation stream, the next allocation reuses the
  // memory in stream order.
  for (const auto& [size, kept] : blocks) {
    for (const exported_block& block : kept) {
      cu_.cuMemFreeAsync(block.pointer, allocation_stream_.get());
    }
  }
}

grant_details cuda_pool::grant_of(const placement& where) const {
  const CUmemPoolPtrExportData& data = exports_.at(where.offset);
  grant_details details;
  static_assert(sizeof(details.pointer_export) == sizeof(data));
  std::memcpy(details.pointer_export.data(), &data, sizeof data);
  return details;
}

void cuda_pool::holder_released(std::uint64_t holder, const placement&,
                                const std::optional<ipc_handle>& released_event) {
  if (!released_event) return;
  enter();
  const failed_call failed =
      holder_events_.wait_on(holder, *released_event, context_.get(), release_stream_.get());
  if (!failed) return;
  if (failed.call == holder_events::kOpenCall) {
    throw request_error(proto::errc::invalid_argument,
                        "release event handle cannot be opened: " + cuda::describe(failed.status));
  }
  check(failed.status, failed.call);
}

void cuda_pool::do_free(const placement& where, std::uint64_t size) noexcept {
  const auto exported = exports_.find(where.offset);
  // do_allocate records every block it hands out, and only a block with its export data can be
  // handed out again.
  std::optional<exported_block> block;
  if (exported != exports_.end()) {
    block = exported_block{where.offset, exported->second};
    exports_.erase(exported);
  }
  if (cu_.cuCtxSetCurrent(context_.get()) != CUDA_SUCCESS) return;
  log_failed(released_->reuse_or_free_landed(allocation_stream_.get()));
  if (!block) {
    cu_.cuMemFreeAsync(where.offset, release_stream_.get());  // behind the holders' waits
    return;
  }
  log_failed(released_->add(*block, size, release_stream_.get()));
}

void cuda_pool::log_failed(failed_call failed) const noexcept {
  if (!failed) return;
  try {
    spdlog::error("pool '{}': {} of a released block: {}", config().name, failed.call,
                  cuda::describe(failed.status));
  } catch (...) {
    // A log line that cannot be made (its text is allocated) must not end the daemon.
  }
}

std::uint64_t cuda_pool::largest_possible() const noexcept {
  const std::uint64_t taken = usage().bytes_in_use + spares_.bytes();
  return config().size > taken ? config().size - taken : 0;
}

driver_usage cuda_pool::driver_counters() const {
  driver_usage counters;
  const std::pair<CUmemPool_attribute, std::uint64_t*> reads[] = {
      {CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &counters.reserved_current},
      {CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &counters.reserved_high},
      {CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &counters.used_current},
      {CU_MEMPOOL_ATTR_USED_MEM_HIGH, &counters.used_high}};
  for (const auto& [attribute, out] : reads) {
    cuuint64_t value = 0;
    if (cu_.cuMemPoolGetAttribute(pool_.get(), attribute, &value) == CUDA_SUCCESS) *out = value;
  }
  return counters;
}

}  // namespace gpumem::daemon
