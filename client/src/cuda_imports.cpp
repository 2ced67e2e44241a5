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

std::unique_ptr<cuda_pool_import> cuda_imports::import_pool(const proto::pool_reply& reply,
                                                            int fd) {
  auto home = std::make_unique<cuda_pool_import>();
  CUdevice device = 0;
  check_cuda(cu_.cuDeviceGet(&device, reply.device), "cuDeviceGet");
  check_cuda(cuda::primary_context::retain(cu_, device, home->context),
             "retaining the primary context");
  const CUcontext context = home->context.get();
  check_cuda(cuda::memory_pool::import_fd(cu_, context, fd, home->pool),
             "cuMemPoolImportFromShareableHandle");
  // All zero: the daemon shares no events with this uid and answers grants once they are done.
  if (std::any_of(std::begin(reply.ready_event), std::end(reply.ready_event),
                  [](std::uint8_t byte) { return byte != 0; })) {
    CUipcEventHandle ready{};
    std::memcpy(&ready, reply.ready_event, sizeof ready);
    check_cuda(cuda::event::open_ipc(cu_, context, ready, home->ready),
               "cuIpcOpenEventHandle(ready)");
  }
  check_cuda(cuda::stream::create(cu_, context, CU_STREAM_NON_BLOCKING, home->bridge),
             "cuStreamCreate(bridge)");
  check_cuda(cuda::event::create(cu_, context, CU_EVENT_DISABLE_TIMING, home->bridged),
             "cuEventCreate");
  return home;
}

CUcontext cuda_imports::context_of(CUstream stream, const cuda_pool_import& home) {
  if (stream == nullptr) return home.context.get();
  CUcontext context = nullptr;
  check_cuda(cu_.cuStreamGetCtx(stream, &context), "cuStreamGetCtx");
  return context;
}

void cuda_imports::grant_access_from(cuda_pool_import& home, CUstream, CUcontext stream_context) {
  if (stream_context == home.context.get()) return;
  CUdevice device = 0;
  {
    context_scope scope(cu_, stream_context);
    check_cuda(cu_.cuCtxGetDevice(&device), "cuCtxGetDevice");
  }
  if (device == home.context.device() ||
      std::find(home.peers.begin(), home.peers.end(), device) != home.peers.end()) {
    return;
  }
  context_scope scope(cu_, home.context.get());
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check_cuda(cu_.cuMemPoolSetAccess(home.pool.get(), &access, 1),
             "cuMemPoolSetAccess (is this device in the pool's peer_access?)");
  home.peers.push_back(device);
}

void cuda_imports::wait_for(cuda_pool_import& home, CUevent home_event, CUstream stream,
                            CUcontext stream_context) {
  if (stream_context == home.context.get()) {
    context_scope scope(cu_, stream_context);
    check_cuda(cu_.cuStreamWaitEvent(stream, home_event, 0), "cuStreamWaitEvent");
    return;
  }
  {
    context_scope scope(cu_, home.context.get());
    check_cuda(cu_.cuStreamWaitEvent(home.bridge.get(), home_event, 0),
               "cuStreamWaitEvent(bridge)");
    check_cuda(cu_.cuEventRecord(home.bridged.get(), home.bridge.get()), "cuEventRecord(bridge)");
  }
  context_scope scope(cu_, stream_context);
  check_cuda(cu_.cuStreamWaitEvent(stream, home.bridged.get(), 0), "cuStreamWaitEvent(bridged)");
}

bool cuda_imports::completed(cuda_pool_import& home, CUevent home_event) {
  // The daemon records its ready event after making a block and before granting it, so once
  // the latest record is complete there is nothing for the stream to wait on. On an H100 the
  // query costs 0.07 us of host time and a stream's wait on the event 0.8-0.9 us.
  context_scope scope(cu_, home.context.get());
  return cu_.cuEventQuery(home_event) == CUDA_SUCCESS;
}

void cuda_imports::record_after(cuda_pool_import& home, CUevent home_event, CUstream stream,
                                CUcontext stream_context) {
  if (stream_context == home.context.get()) {
    context_scope scope(cu_, stream_context);
    check_cuda(cu_.cuEventRecord(home_event, stream), "cuEventRecord");
    return;
  }
  const CUevent crossing = crossing_for(stream_context);
  {
    context_scope scope(cu_, stream_context);
    check_cuda(cu_.cuEventRecord(crossing, stream), "cuEventRecord(crossing)");
  }
  context_scope scope(cu_, home.context.get());
  check_cuda(cu_.cuStreamWaitEvent(home.bridge.get(), crossing, 0), "cuStreamWaitEvent(crossing)");
  check_cuda(cu_.cuEventRecord(home_event, home.bridge.get()), "cuEventRecord(bridge)");
}

CUevent cuda_imports::crossing_for(CUcontext context) {
  auto found = crossings_.find(context);
  if (found == crossings_.end()) {
    cuda::event made;
    check_cuda(cuda::event::create(cu_, context, CU_EVENT_DISABLE_TIMING, made),
               "cuEventCreate(crossing)");
    found = crossings_.emplace(context, std::move(made)).first;
  }
  return found->second.get();
}

const cuda_imports::release_marker& cuda_imports::marker_for(cuda_pool_import& home) {
  if (!home.marker.event) {
    release_marker made;
    check_cuda(cuda::event::create(cu_, home.context.get(),
                                   CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS, made.event),
               "cuEventCreate(interprocess)");
    check_cuda(cu_.cuIpcGetEventHandle(&made.handle, made.event.get()), "cuIpcGetEventHandle");
    home.marker = std::move(made);
  }
  return home.marker;
}

CUdeviceptr cuda_imports::import(cuda_pool_import& home, const proto::allocation_reply& grant,
                                 CUstream stream) {
  std::lock_guard lock(mutex_);
  const CUcontext stream_context = context_of(stream, home);
  grant_access_from(home, stream, stream_context);
  auto found = pointers_.find(grant.alloc_id);
  if (found == pointers_.end()) {
    context_scope scope(cu_, home.context.get());
    CUmemPoolPtrExportData data{};
    std::memcpy(&data, grant.pointer_export, sizeof data);
    CUdeviceptr pointer = 0;
    check_cuda(cu_.cuMemPoolImportPointer(&pointer, home.pool.get(), &data),
               "cuMemPoolImportPointer");
    found = pointers_.emplace(grant.alloc_id, imported_pointer{pointer, &home, 0, {}}).first;
  }
  if (home.ready && !completed(home, home.ready.get())) {
    wait_for(home, home.ready.get(), stream, stream_context);
  }
  ++found->second.references;
  return found->second.pointer;
}

void cuda_imports::release(std::uint64_t alloc_id, CUstream stream,
                           proto::release_request& request) {
  std::lock_guard lock(mutex_);
  auto found = pointers_.find(alloc_id);
  if (found == pointers_.end()) return;
  imported_pointer& entry = found->second;
  cuda_pool_import& home = *entry.home;
  const CUcontext stream_context = context_of(stream, home);
  {
    context_scope scope(cu_, stream_context);
    if (--entry.references > 0) {
      cuda::event used;
      check_cuda(cuda::event::create(cu_, stream_context, CU_EVENT_DISABLE_TIMING, used),
                 "cuEventCreate");
      check_cuda(cu_.cuEventRecord(used.get(), stream), "cuEventRecord");
      entry.earlier_uses.push_back(std::move(used));
    } else {
      for (const cuda::event& used : entry.earlier_uses) {
        check_cuda(cu_.cuStreamWaitEvent(stream, used.get(), 0), "cuStreamWaitEvent");
      }
      // The importer frees first, in stream order; the daemon frees after the event below.
      check_cuda(cu_.cuMemFreeAsync(entry.pointer, stream), "cuMemFreeAsync(import)");
      pointers_.erase(found);
    }
  }
  if (!interprocess_events_) {
    // The daemon cannot open an event of this uid: the work is done before it hears of it.
    context_scope scope(cu_, stream_context);
    check_cuda(cu_.cuStreamSynchronize(stream), "cuStreamSynchronize(release)");
    return;
  }
  // One interprocess event per pool serves every release: the daemon's wait captures it as
  // recorded now, before this request is answered.
  const release_marker& marker = marker_for(home);
  record_after(home, marker.event.get(), stream, stream_context);
  request.flags |= proto::kReleaseHasEvent;
  std::memcpy(request.released_event, &marker.handle, sizeof marker.handle);
}

}  // namespace gpumem::detail
