#include "sync/cuda_signal_page.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <new>

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
  check(cuda::stream::create(cu_, context_.get(), CU_STREAM_NON_BLOCKING, reads_),
        "cuStreamCreate");
  check(cuda::event::create(cu_, context_.get(), CU_EVENT_DISABLE_TIMING, repairs_so_far_),
        "cuEventCreate");
  constexpr std::size_t kBytes = sync::kCellCount * sizeof(std::uint32_t);
  // A multiple of aligned_alloc's alignment; one page where pages are 4 KiB.
  static_assert(kBytes % 4096 == 0, "aligned_alloc takes a multiple of the alignment");
  served_.reset(static_cast<std::uint32_t*>(std::aligned_alloc(4096, kBytes)));
  if (!served_) throw std::bad_alloc();
  std::fill_n(served_.get(), sync::kCellCount, 0u);
  check(cuda::host_registration::register_range(cu_, served_.get(), kBytes, 0, served_pinned_),
        "cuMemHostRegister(served words)");
}

cuda_signal_page::~cuda_signal_page() {
  if (!read_in_flight_) return;
  // A read still on its way would land in freed memory, or read an unmapped page. It waits for
  // nothing but the repairs before it and a copy engine, and is given their bound; past that
  // the buffer and the page's mapping stay, for good.
  try {
    check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
    if (drained_within(reads_, kRepairsBound)) return;
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): kept, as below
  }
  (void)served_pinned_.release();
  (void)served_.release();
  (void)mapped_.release();
  (void)range_.release();
  spdlog::warn("a signal page's last read of its words had not landed: its mapping is kept");
}

void cuda_signal_page::pinned_words::operator()(std::uint32_t* words) const noexcept {
  std::free(words);  // NOLINT(cppcoreguidelines-no-malloc): from aligned_alloc
}

CUdeviceptr cuda_signal_page::address(std::uint32_t cell, std::size_t offset) const {
  if (cell >= sync::kCellCount || offset + sizeof(std::uint32_t) > sync::kSignalCellSize) {
    throw request_error(proto::errc::internal, "signal page word out of range");
  }
  return range_.get() + cell * sync::kSignalCellSize + offset;
}

std::uint32_t cuda_signal_page::read(std::uint32_t cell, std::size_t offset) {
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  // After the writes queued before it (a reset's zeroes, say), as far as they land in time.
  (void)repairs_landed();
  std::uint32_t value = 0;
  check(cu_.cuMemcpyDtoH(&value, address(cell, offset), sizeof value), "cuMemcpyDtoH");
  return value;
}

void cuda_signal_page::write(std::uint32_t cell, std::size_t offset, std::uint32_t value) {
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  check(cu_.cuStreamWriteValue32(repairs_.get(), address(cell, offset), value, 0),
        "cuStreamWriteValue32");
}

std::uint16_t cuda_signal_page::ahead(const waiting_turn& each, std::uint32_t word) noexcept {
  return static_cast<std::uint16_t>(each.turn - word);
}

bool cuda_signal_page::passed_by(const waiting_turn& each, std::uint32_t word) noexcept {
  // A turn still to come is less than a lock's queue ahead of its word (layout.hpp): one
  // farther ahead is behind it, released by the dead client's stream before the process died,
  // or passed by this page before a restart.
  return ahead(each, word) >= sync::kTurnsAheadBound;
}

void cuda_signal_page::pass_on(waiting_turn& each) {
  // The word reached the turn and stays there until it is written here: its holder is dead.
  // The turn waits on until a read queued after the write lands, so that its queue entry,
  // which keeps the ticket a queue's length later from being taken, is not freed before.
  write(each.cell, offsetof(sync::signal_cell, serving), each.next_turn);
  each.written = true;
  each.told_by_read = reads_queued_ + 1;
}

void cuda_signal_page::warn_failed(const waiting_turn& each, const std::exception& error) noexcept {
  try {
    failed_turns_.warn("signal cell {}: passing on turn {} of a dead client: {}", each.cell,
                       each.turn, error.what());
  } catch (...) {  // NOLINT(bugprone-empty-catch): the turn waits on, logged or not
  }
}

void cuda_signal_page::pass_turn(std::uint32_t cell, std::uint32_t turn, std::uint32_t next_turn) {
  (void)address(cell, offsetof(sync::signal_cell, serving));  // refused here, not at every look
  // Told by the next read queued: one queued before could have read the word before a clear's
  // zeroes or a pass queued since.
  const bool none_waited = waiting_turns_.empty();
  waiting_turns_.push_back({cell, turn, next_turn, reads_queued_ + 1, false});
  try {
    check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
    // A read left by turns that have all gone since tells nobody: it need not be waited for.
    if (read_in_flight_ && none_waited && drained_within(reads_, {})) read_in_flight_ = false;
    if (!read_in_flight_) queue_read();  // else the next is queued once it lands
  } catch (const std::exception& error) {
    warn_failed(waiting_turns_.back(), error);  // queued again at the next look
  }
}

void cuda_signal_page::queue_read() {
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = address(0, offsetof(sync::signal_cell, serving));
  copy.srcPitch = sync::kSignalCellSize;
  copy.dstMemoryType = CU_MEMORYTYPE_HOST;
  copy.dstHost = served_.get();
  copy.dstPitch = sizeof(std::uint32_t);
  copy.WidthInBytes = sizeof(std::uint32_t);
  copy.Height = sync::kCellCount;
  check(cu_.cuEventRecord(repairs_so_far_.get(), repairs_.get()), "cuEventRecord");
  check(cu_.cuStreamWaitEvent(reads_.get(), repairs_so_far_.get(), 0), "cuStreamWaitEvent");
  check(cu_.cuMemcpy2DAsync(&copy, reads_.get()), "cuMemcpy2DAsync");
  ++reads_queued_;
  read_in_flight_ = true;
}

bool cuda_signal_page::drained_within(const cuda::stream& stream, std::chrono::microseconds bound) {
  const auto give_up = std::chrono::steady_clock::now() + bound;
  for (;;) {
    const CUresult status = cu_.cuStreamQuery(stream.get());
    if (status == CUDA_SUCCESS) return true;
    if (status != CUDA_ERROR_NOT_READY) check(status, "cuStreamQuery");
    if (std::chrono::steady_clock::now() >= give_up) return false;
  }
}

template <class Done>
void cuda_signal_page::finish_turns_if(Done done, const passed_turn_sink& passed) noexcept {
  std::erase_if(waiting_turns_, [&](const waiting_turn& each) {
    if (!done(each)) return false;
    passed(each.cell, each.turn);
    return true;
  });
}

void cuda_signal_page::decide(const passed_turn_sink& passed) noexcept {
  const std::uint64_t landed = reads_queued_;  // one read is on its way at a time
  // A pass written before the read landed with it: that turn is done, and its word is not
  // looked at again (the lock went on from it).
  finish_turns_if(
      [&](const waiting_turn& each) {
        if (each.told_by_read > landed) return false;
        return each.written || passed_by(each, served_[each.cell]);
      },
      passed);
  for (waiting_turn& each : waiting_turns_) {
    if (each.written || each.told_by_read > landed || ahead(each, served_[each.cell]) != 0) {
      continue;
    }
    try {
      pass_on(each);
    } catch (const std::exception& error) {
      warn_failed(each, error);  // the word stays at the turn: passed on at a later look
    }
  }
}

bool cuda_signal_page::pass_arrived_turns(const passed_turn_sink& passed) noexcept {
  if (waiting_turns_.empty()) return false;
  try {
    check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
    if (read_in_flight_) {
      // Landed: the read, and every write queued on repairs_ before it.
      if (!drained_within(reads_, {})) return true;  // held up: looked at again next round
      read_in_flight_ = false;
      decide(passed);
    }
    // Behind the passes just written, so that it tells of them.
    if (!waiting_turns_.empty()) queue_read();
  } catch (const std::exception& error) {
    if (!waiting_turns_.empty()) warn_failed(waiting_turns_.front(), error);
  }
  return !waiting_turns_.empty();
}

void cuda_signal_page::clear(std::uint32_t cell) {
  std::erase_if(waiting_turns_, [&](const waiting_turn& each) { return each.cell == cell; });
  check(cu_.cuCtxSetCurrent(context_.get()), "cuCtxSetCurrent");
  // A hold-up that has ended gives these zeroes their full bound again: asked after them, the
  // stream would never look drained while clients keep making clears.
  if (held_up_) held_up_ = !drained_within(repairs_, {});
  // Stream writes behind the cell's earlier repairs: a dead party's jump made before a reset
  // must not land after it (a memset on the null stream, which a non-blocking stream does not
  // wait for, could be overtaken). Writes, not a memset, so that no kernel has to find an SM
  // free: under MPS another client's kernels may hold them all.
  constexpr std::size_t kWords = sizeof(sync::signal_cell) / sizeof(std::uint32_t);
  static_assert(kWords < 256, "one cuStreamBatchMemOp takes fewer than 256 operations");
  std::array<CUstreamBatchMemOpParams, kWords> zeroes{};
  for (std::size_t word = 0; word < kWords; ++word) {
    auto& write = zeroes[word].writeValue;
    write.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    write.address = address(cell, word * sizeof(std::uint32_t));
    write.value = 0;
    // CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER would save the fences, but on an H200 (driver
    // 580.159) cuStreamBatchMemOp refused it with CUDA_ERROR_INVALID_VALUE.
    write.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
  }
  check(cu_.cuStreamBatchMemOp(repairs_.get(), kWords, zeroes.data(), 0), "cuStreamBatchMemOp");
  // Landed before the reset's or the next open's reply, so that no client's stream writes a
  // count that the zeroes then wipe.
  if (!repairs_landed()) {
    late_zeroes_.warn(
        "signal cell {}: its zeroes had not landed (within {} us, or since the "
        "repairs stream was last held up); going on without them",
        cell, kRepairsBound.count());
  }
}

bool cuda_signal_page::repairs_landed() {
  // Once a wait ran out, the next ones only look until the stream has drained: a queue held up
  // costs the daemon one bound, not one per request a client can make meanwhile.
  held_up_ = !drained_within(repairs_, held_up_ ? std::chrono::microseconds{0} : kRepairsBound);
  return !held_up_;
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
