#include "cuda_imports.hpp"

#include <algorithm>
#include <cstring>

#include "cuda_context.hpp"
#include "gpumem/gpumem.hpp"

namespace gpumem::detail {

// Streams of other devices than the pool's never wait on, or record, the pool's interprocess
// events directly: on an H200 pair (driver 580.159) a stream of device 1 waiting on an IPC
// event opened in device 0's context crashed inside cuStreamWaitEvent. A bridge stream in the
// pool's context relays the ordering through plain events, which cross devices as documented.

cuda_imports::~cuda_imports() {
  // Imports still open belong to buffers that outlive the connection's last user: the
  // driver reclaims them with the process. Only what this object made is given back here.
  for (auto& [context, event] : crossings_) cu_.cuEventDestroy(event);
  for (auto& [id, home] : pools_) {
    cu_.cuCtxSetCurrent(home.context);
    cu_.cuEventDestroy(home.ready);
    cu_.cuEventDestroy(home.bridged);
    if (home.marker.event != nullptr) cu_.cuEventDestroy(home.marker.event);
    cu_.cuStreamDestroy(home.bridge);
    cu_.cuDevicePrimaryCtxRelease(home.device);
  }
}

void cuda_imports::add_pool(const proto::pool_reply& reply, unique_fd handle) {
  std::lock_guard lock(mutex_);
  if (pools_.contains(reply.pool_id)) return;
  imported_pool home{};
  check_cuda(cu_.cuDeviceGet(&home.device, reply.device), "cuDeviceGet");
  check_cuda(cu_.cuDevicePrimaryCtxRetain(&home.context, home.device), "cuDevicePrimaryCtxRetain");
  context_scope scope(cu_, home.context);
  check_cuda(cu_.cuMemPoolImportFromShareableHandle(
                 &home.pool, reinterpret_cast<void*>(static_cast<std::uintptr_t>(handle.get())),
                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
             "cuMemPoolImportFromShareableHandle");
  CUipcEventHandle ready{};
  std::memcpy(&ready, reply.ready_event, sizeof ready);
  check_cuda(cu_.cuIpcOpenEventHandle(&home.ready, ready), "cuIpcOpenEventHandle(ready)");
  check_cuda(cu_.cuStreamCreate(&home.bridge, CU_STREAM_NON_BLOCKING), "cuStreamCreate(bridge)");
  check_cuda(cu_.cuEventCreate(&home.bridged, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  pools_.emplace(reply.pool_id, home);
}

CUcontext cuda_imports::context_of(CUstream stream, const imported_pool& home) {
  if (stream == nullptr) return home.context;
  CUcontext context = nullptr;
  check_cuda(cu_.cuStreamGetCtx(stream, &context), "cuStreamGetCtx");
  return context;
}

void cuda_imports::grant_access_from(imported_pool& home, CUstream, CUcontext stream_context) {
  if (stream_context == home.context) return;
  CUdevice device = 0;
  {
    context_scope scope(cu_, stream_context);
    check_cuda(cu_.cuCtxGetDevice(&device), "cuCtxGetDevice");
  }
  if (device == home.device ||
      std::find(home.peers.begin(), home.peers.end(), device) != home.peers.end()) {
    return;
  }
  context_scope scope(cu_, home.context);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check_cuda(cu_.cuMemPoolSetAccess(home.pool, &access, 1),
             "cuMemPoolSetAccess (is this device in the pool's peer_access?)");
  home.peers.push_back(device);
}

void cuda_imports::wait_for(imported_pool& home, CUevent home_event, CUstream stream,
                            CUcontext stream_context) {
  if (stream_context == home.context) {
    context_scope scope(cu_, home.context);
    check_cuda(cu_.cuStreamWaitEvent(stream, home_event, 0), "cuStreamWaitEvent");
    return;
  }
  {
    context_scope scope(cu_, home.context);
    check_cuda(cu_.cuStreamWaitEvent(home.bridge, home_event, 0), "cuStreamWaitEvent(bridge)");
    check_cuda(cu_.cuEventRecord(home.bridged, home.bridge), "cuEventRecord(bridge)");
  }
  context_scope scope(cu_, stream_context);
  check_cuda(cu_.cuStreamWaitEvent(stream, home.bridged, 0), "cuStreamWaitEvent(bridged)");
}

void cuda_imports::record_after(imported_pool& home, CUevent home_event, CUstream stream,
                                CUcontext stream_context) {
  if (stream_context == home.context) {
    context_scope scope(cu_, home.context);
    check_cuda(cu_.cuEventRecord(home_event, stream), "cuEventRecord");
    return;
  }
  const CUevent crossing = crossing_for(stream_context);
  {
    context_scope scope(cu_, stream_context);
    check_cuda(cu_.cuEventRecord(crossing, stream), "cuEventRecord(crossing)");
  }
  context_scope scope(cu_, home.context);
  check_cuda(cu_.cuStreamWaitEvent(home.bridge, crossing, 0), "cuStreamWaitEvent(crossing)");
  check_cuda(cu_.cuEventRecord(home_event, home.bridge), "cuEventRecord(bridge)");
}

CUevent cuda_imports::crossing_for(CUcontext context) {
  auto found = crossings_.find(context);
  if (found == crossings_.end()) {
    context_scope scope(cu_, context);
    CUevent event = nullptr;
    check_cuda(cu_.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate(crossing)");
    found = crossings_.emplace(context, event).first;
  }
  return found->second;
}

const cuda_imports::release_marker& cuda_imports::marker_for(imported_pool& home) {
  if (home.marker.event == nullptr) {
    context_scope scope(cu_, home.context);
    check_cuda(
        cu_.cuEventCreate(&home.marker.event, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS),
        "cuEventCreate(interprocess)");
    check_cuda(cu_.cuIpcGetEventHandle(&home.marker.handle, home.marker.event),
               "cuIpcGetEventHandle");
  }
  return home.marker;
}

CUdeviceptr cuda_imports::import(const proto::allocation_reply& grant, CUstream stream) {
  std::lock_guard lock(mutex_);
  imported_pool& home = pools_.at(grant.pool_id);
  const CUcontext stream_context = context_of(stream, home);
  grant_access_from(home, stream, stream_context);
  auto found = pointers_.find(grant.alloc_id);
  if (found == pointers_.end()) {
    context_scope scope(cu_, home.context);
    CUmemPoolPtrExportData data{};
    std::memcpy(&data, grant.pointer_export, sizeof data);
    CUdeviceptr pointer = 0;
    check_cuda(cu_.cuMemPoolImportPointer(&pointer, home.pool, &data), "cuMemPoolImportPointer");
    found =
        pointers_.emplace(grant.alloc_id, imported_pointer{pointer, grant.pool_id, 0, {}}).first;
  }
  wait_for(home, home.ready, stream, stream_context);
  ++found->second.references;
  return found->second.pointer;
}

void cuda_imports::release(std::uint64_t alloc_id, CUstream stream,
                           proto::release_request& request) {
  std::lock_guard lock(mutex_);
  auto found = pointers_.find(alloc_id);
  if (found == pointers_.end()) return;
  imported_pointer& entry = found->second;
  imported_pool& home = pools_.at(entry.pool_id);
  const CUcontext stream_context = context_of(stream, home);
  {
    context_scope scope(cu_, stream_context);
    if (--entry.references > 0) {
      CUevent used = nullptr;
      check_cuda(cu_.cuEventCreate(&used, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      check_cuda(cu_.cuEventRecord(used, stream), "cuEventRecord");
      entry.earlier_uses.push_back(used);
    } else {
      for (CUevent used : entry.earlier_uses) {
        check_cuda(cu_.cuStreamWaitEvent(stream, used, 0), "cuStreamWaitEvent");
        cu_.cuEventDestroy(used);
      }
      // The importer frees first, in stream order; the daemon frees after the event below.
      check_cuda(cu_.cuMemFreeAsync(entry.pointer, stream), "cuMemFreeAsync(import)");
      pointers_.erase(found);
    }
  }
  // One interprocess event per pool serves every release: the daemon's wait captures it as
  // recorded now, before this request is answered.
  const release_marker& marker = marker_for(home);
  record_after(home, marker.event, stream, stream_context);
  request.flags |= proto::kReleaseHasEvent;
  std::memcpy(request.released_event, &marker.handle, sizeof marker.handle);
}

}  // namespace gpumem::detail
