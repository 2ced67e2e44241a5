#include "support/fake_driver.hpp"

#include <fcntl.h>

#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace gpumem::testing {

namespace {

fake_books books;
std::uintptr_t next_handle = 1;
/// The context each handle was made in.
std::unordered_map<std::uintptr_t, CUcontext> made_in;
/// Events recorded on a held stream, by the stream: they have not landed.
std::map<CUevent, CUstream> events_on_held_streams;
/// The size each range was reserved with and each mapping made with, by address.
std::map<std::pair<kind, CUdeviceptr>, std::size_t> sizes;

bool fails(const char* call) {
  return books.failing == call;
}

/// A new handle; @p spacing leaves room after it (addresses of ranges).
std::uintptr_t make(kind which, std::uintptr_t spacing = 1) {
  const std::uintptr_t handle = next_handle++ * spacing;
  books.live[which].insert(handle);
  ++books.made[which];
  made_in[handle] = books.current;
  return handle;
}

CUresult free_handle(kind which, std::uintptr_t handle, bool in_its_context, const char* call) {
  if (books.live[which].erase(handle) == 0) {
    books.misuse.push_back(std::string(call) + " of a handle that is not alive");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (in_its_context && made_in[handle] != books.current) {
    books.misuse.push_back(std::string(call) + " outside the handle's context");
  }
  return CUDA_SUCCESS;
}

template <class Handle>
Handle as(std::uintptr_t value) {
  if constexpr (std::is_pointer_v<Handle>) {
    return reinterpret_cast<Handle>(value);
  } else {
    return static_cast<Handle>(value);
  }
}

template <class Handle>
std::uintptr_t raw(Handle handle) {
  if constexpr (std::is_pointer_v<Handle>) {
    return reinterpret_cast<std::uintptr_t>(handle);
  } else {
    return static_cast<std::uintptr_t>(handle);
  }
}

CUresult error_name(CUresult, const char** text) {
  *text = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult device_count(int* count) {
  if (fails("cuDeviceGetCount")) return books.fail_with;
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult device_get(CUdevice* device, int ordinal) {
  if (fails("cuDeviceGet")) return books.fail_with;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult primary_retain(CUcontext* context, CUdevice device) {
  if (fails("cuDevicePrimaryCtxRetain")) return books.fail_with;
  ++books.retains[device];
  *context = fake_primary_context(device);
  return CUDA_SUCCESS;
}

CUresult primary_release(CUdevice device) {
  if (books.retains[device] == 0) {
    books.misuse.push_back("cuDevicePrimaryCtxRelease without a retain");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  --books.retains[device];
  return CUDA_SUCCESS;
}

CUresult get_current(CUcontext* context) {
  *context = books.current;
  return CUDA_SUCCESS;
}

CUresult set_current(CUcontext context) {
  if (fails("cuCtxSetCurrent")) return books.fail_with;
  books.current = context;
  return CUDA_SUCCESS;
}

CUresult stream_create(CUstream* stream, unsigned) {
  if (fails("cuStreamCreate")) return books.fail_with;
  *stream = as<CUstream>(make(kind::stream));
  return CUDA_SUCCESS;
}

CUresult stream_destroy(CUstream stream) {
  return free_handle(kind::stream, raw(stream), true, "cuStreamDestroy");
}

/// Device work (stream queries and memory operations, memsets, copies) the fake does not do,
/// only counts: it answers fail_with when asked to fail (CUDA_ERROR_NOT_READY for a stream that
/// does not drain, say).
CUresult device_work(const char* call) {
  ++books.calls[call];
  return fails(call) ? books.fail_with : CUDA_SUCCESS;
}

CUresult stream_query(CUstream) {
  return device_work("cuStreamQuery");
}

/// Carries out the batch's writes on fake().words.
CUresult batch_mem_op(CUstream, unsigned count, CUstreamBatchMemOpParams* operations, unsigned) {
  const CUresult status = device_work("cuStreamBatchMemOp");
  for (unsigned i = 0; status == CUDA_SUCCESS && i < count; ++i) {
    const auto& write = operations[i].writeValue;
    if (write.operation == CU_STREAM_MEM_OP_WRITE_VALUE_32) {
      books.words[write.address] = static_cast<std::uint32_t>(write.value);
    }
  }
  return status;
}

CUresult memset_d32(CUdeviceptr, unsigned, std::size_t) {
  return device_work("cuMemsetD32");
}

CUresult write_value(CUstream, CUdeviceptr address, std::uint32_t value, unsigned) {
  const CUresult status = device_work("cuStreamWriteValue32");
  if (status == CUDA_SUCCESS) books.words[address] = value;
  return status;
}

/// Reads fake().words, whole words at 4-byte steps; the rest reads as zeroes.
void read_words(void* to, CUdeviceptr from, std::size_t bytes) {
  std::memset(to, 0, bytes);
  for (std::size_t at = 0; at + sizeof(std::uint32_t) <= bytes; at += sizeof(std::uint32_t)) {
    if (const auto word = books.words.find(from + at); word != books.words.end()) {
      std::memcpy(static_cast<char*>(to) + at, &word->second, sizeof word->second);
    }
  }
}

CUresult copy_to_host(void* to, CUdeviceptr from, std::size_t bytes) {
  read_words(to, from, bytes);
  return device_work("cuMemcpyDtoH");
}

/// Gathers rows of fake().words into host memory at once, when the copy is queued rather than
/// when it runs, as a stream with nothing before the copy would; words never written read as
/// zeroes.
CUresult copy_2d_async(const CUDA_MEMCPY2D* copy, CUstream) {
  const CUresult status = device_work("cuMemcpy2DAsync");
  if (status != CUDA_SUCCESS) return status;
  if (copy->srcMemoryType != CU_MEMORYTYPE_DEVICE || copy->dstMemoryType != CU_MEMORYTYPE_HOST ||
      copy->srcPitch < copy->WidthInBytes || copy->dstPitch < copy->WidthInBytes) {
    books.misuse.push_back("cuMemcpy2DAsync other than device to host, or pitches too small");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (books.live[kind::registration].count(raw(copy->dstHost)) == 0) {
    books.misuse.push_back("cuMemcpy2DAsync into host memory not registered (not async)");
  }
  for (std::size_t row = 0; row < copy->Height; ++row) {
    read_words(static_cast<char*>(copy->dstHost) + row * copy->dstPitch,
               copy->srcDevice + row * copy->srcPitch, copy->WidthInBytes);
  }
  return CUDA_SUCCESS;
}

CUresult event_record(CUevent event, CUstream stream) {
  const CUresult status = device_work("cuEventRecord");
  if (status != CUDA_SUCCESS) return status;
  if (books.held_streams.contains(stream)) {
    events_on_held_streams[event] = stream;
  } else {
    events_on_held_streams.erase(event);
  }
  return CUDA_SUCCESS;
}

CUresult event_query(CUevent event) {
  const CUresult status = device_work("cuEventQuery");
  if (status != CUDA_SUCCESS) return status;
  return events_on_held_streams.contains(event) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult free_async(CUdeviceptr memory, CUstream stream) {
  const CUresult status = device_work("cuMemFreeAsync");
  if (status == CUDA_SUCCESS) books.frees.emplace_back(memory, stream);
  return status;
}

CUresult stream_wait_event(CUstream stream, CUevent event, unsigned) {
  if (!books.live[kind::event].contains(raw(event))) {
    books.misuse.push_back("cuStreamWaitEvent on an event that is not alive");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  const CUresult status = device_work("cuStreamWaitEvent");
  if (status == CUDA_SUCCESS) books.event_waits.emplace_back(stream, event);
  return status;
}

CUresult event_create(CUevent* event, unsigned) {
  if (fails("cuEventCreate")) return books.fail_with;
  *event = as<CUevent>(make(kind::event));
  return CUDA_SUCCESS;
}

CUresult ipc_open_event(CUevent* event, CUipcEventHandle) {
  if (fails("cuIpcOpenEventHandle")) return books.fail_with;
  *event = as<CUevent>(make(kind::event));
  return CUDA_SUCCESS;
}

CUresult event_destroy(CUevent event) {
  return free_handle(kind::event, raw(event), true, "cuEventDestroy");
}

CUresult pool_create(CUmemoryPool* pool, const CUmemPoolProps*) {
  if (fails("cuMemPoolCreate")) return books.fail_with;
  *pool = as<CUmemoryPool>(make(kind::pool));
  return CUDA_SUCCESS;
}

CUresult pool_import(CUmemoryPool* pool, void*, CUmemAllocationHandleType, unsigned long long) {
  if (fails("cuMemPoolImportFromShareableHandle")) return books.fail_with;
  *pool = as<CUmemoryPool>(make(kind::pool));
  return CUDA_SUCCESS;
}

CUresult pool_destroy(CUmemoryPool pool) {
  return free_handle(kind::pool, raw(pool), true, "cuMemPoolDestroy");
}

CUresult mem_create(CUmemGenericAllocationHandle* handle, std::size_t, const CUmemAllocationProp*,
                    unsigned long long) {
  if (fails("cuMemCreate")) return books.fail_with;
  *handle = make(kind::allocation);
  return CUDA_SUCCESS;
}

CUresult mem_import(CUmemGenericAllocationHandle* handle, void*, CUmemAllocationHandleType) {
  if (fails("cuMemImportFromShareableHandle")) return books.fail_with;
  *handle = make(kind::allocation);
  return CUDA_SUCCESS;
}

/// A descriptor of /dev/null stands for the exported memory.
CUresult export_handle(void* shareable, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                       unsigned long long) {
  if (fails("cuMemExportToShareableHandle")) return books.fail_with;
  *static_cast<int*>(shareable) = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return CUDA_SUCCESS;
}

CUresult mem_release(CUmemGenericAllocationHandle handle) {
  return free_handle(kind::allocation, handle, false, "cuMemRelease");
}

void check_size(kind which, CUdeviceptr at, std::size_t size, const char* call) {
  if (sizes[{which, at}] != size) {
    books.misuse.push_back(std::string(call) + " with another size than the handle's");
  }
}

CUresult address_reserve(CUdeviceptr* base, std::size_t size, std::size_t, CUdeviceptr,
                         unsigned long long) {
  if (fails("cuMemAddressReserve")) return books.fail_with;
  *base = make(kind::range, std::uintptr_t{1} << 32);
  sizes[{kind::range, *base}] = size;
  return CUDA_SUCCESS;
}

CUresult address_free(CUdeviceptr base, std::size_t size) {
  check_size(kind::range, base, size, "cuMemAddressFree");
  return free_handle(kind::range, base, false, "cuMemAddressFree");
}

CUresult mem_map(CUdeviceptr at, std::size_t size, std::size_t, CUmemGenericAllocationHandle,
                 unsigned long long) {
  if (fails("cuMemMap")) return books.fail_with;
  books.live[kind::mapping].insert(at);
  ++books.made[kind::mapping];
  sizes[{kind::mapping, at}] = size;
  return CUDA_SUCCESS;
}

CUresult mem_unmap(CUdeviceptr at, std::size_t size) {
  check_size(kind::mapping, at, size, "cuMemUnmap");
  return free_handle(kind::mapping, at, false, "cuMemUnmap");
}

CUresult set_access(CUdeviceptr at, std::size_t size, const CUmemAccessDesc* rights,
                    std::size_t count) {
  if (fails("cuMemSetAccess")) return books.fail_with;
  if (books.live[kind::mapping].count(at) == 0 || count != 1) {
    books.misuse.push_back("cuMemSetAccess of memory that is not mapped");
    return CUDA_ERROR_INVALID_VALUE;
  }
  check_size(kind::mapping, at, size, "cuMemSetAccess");
  books.access[at] = rights[0].flags;
  return CUDA_SUCCESS;
}

CUresult host_register(void* start, std::size_t, unsigned) {
  if (fails("cuMemHostRegister")) return books.fail_with;
  books.live[kind::registration].insert(raw(start));
  ++books.made[kind::registration];
  return CUDA_SUCCESS;
}

CUresult host_unregister(void* start) {
  return free_handle(kind::registration, raw(start), false, "cuMemHostUnregister");
}

cuda::driver_api make_table() {
  cuda::driver_api table{};
  table.cuGetErrorName = &error_name;
  table.cuGetErrorString = &error_name;
  table.cuDeviceGetCount = &device_count;
  table.cuDeviceGet = &device_get;
  table.cuDevicePrimaryCtxRetain = &primary_retain;
  table.cuDevicePrimaryCtxRelease = &primary_release;
  table.cuCtxGetCurrent = &get_current;
  table.cuCtxSetCurrent = &set_current;
  table.cuStreamCreate = &stream_create;
  table.cuStreamDestroy = &stream_destroy;
  table.cuStreamQuery = &stream_query;
  table.cuStreamBatchMemOp = &batch_mem_op;
  table.cuMemsetD32 = &memset_d32;
  table.cuMemcpyDtoH = &copy_to_host;
  table.cuMemcpy2DAsync = &copy_2d_async;
  table.cuStreamWriteValue32 = &write_value;
  table.cuEventCreate = &event_create;
  table.cuEventRecord = &event_record;
  table.cuEventQuery = &event_query;
  table.cuMemFreeAsync = &free_async;
  table.cuStreamWaitEvent = &stream_wait_event;
  table.cuIpcOpenEventHandle = &ipc_open_event;
  table.cuEventDestroy = &event_destroy;
  table.cuMemPoolCreate = &pool_create;
  table.cuMemPoolImportFromShareableHandle = &pool_import;
  table.cuMemPoolDestroy = &pool_destroy;
  table.cuMemCreate = &mem_create;
  table.cuMemImportFromShareableHandle = &mem_import;
  table.cuMemExportToShareableHandle = &export_handle;
  table.cuMemRelease = &mem_release;
  table.cuMemAddressReserve = &address_reserve;
  table.cuMemAddressFree = &address_free;
  table.cuMemMap = &mem_map;
  table.cuMemUnmap = &mem_unmap;
  table.cuMemSetAccess = &set_access;
  table.cuMemHostRegister = &host_register;
  table.cuMemHostUnregister = &host_unregister;
  return table;
}

}  // namespace

std::size_t fake_books::live_count(kind which) const {
  const auto found = live.find(which);
  return found == live.end() ? 0 : found->second.size();
}

int fake_books::retained() const {
  int total = 0;
  for (const auto& [device, count] : retains) total += count;
  return total;
}

fake_books& fake() {
  return books;
}

void reset_fake_driver() {
  books = fake_books{};
  made_in.clear();
  sizes.clear();
  events_on_held_streams.clear();
}

void hold_stream(CUstream stream, bool held) {
  if (held) {
    books.held_streams.insert(stream);
    return;
  }
  books.held_streams.erase(stream);
  std::erase_if(events_on_held_streams, [&](const auto& event) { return event.second == stream; });
}

const cuda::driver_api& fake_driver() {
  static const cuda::driver_api table = make_table();
  return table;
}

CUcontext fake_primary_context(CUdevice device) {
  return reinterpret_cast<CUcontext>(std::uintptr_t{0x100000} +
                                     static_cast<std::uintptr_t>(device));
}

std::uint32_t& fake_word_in_the_range(std::size_t offset) {
  const auto& ranges = books.live[kind::range];
  if (ranges.size() != 1) {
    books.misuse.push_back("fake_word_in_the_range with " + std::to_string(ranges.size()) +
                           " ranges reserved");
  }
  const CUdeviceptr start = ranges.empty() ? 0 : *ranges.begin();
  return books.words[start + offset];
}

}  // namespace gpumem::testing
