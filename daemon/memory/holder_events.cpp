#include "memory/holder_events.hpp"

#include <cstring>

namespace gpumem::daemon {

failed_call holder_events::wait_on(std::uint64_t holder, const ipc_handle& handle,
                                   CUcontext context, CUstream stream) {
  CUevent event = nullptr;
  if (const failed_call failed = event_for(holder, handle, context, event)) return failed;
  if (const CUresult status = cu_.cuStreamWaitEvent(stream, event, 0); status != CUDA_SUCCESS) {
    // Whatever went wrong with the event, the holder's next release opens its handle anew.
    forget(holder);
    return {"cuStreamWaitEvent(released)", status};
  }
  return {};
}

failed_call holder_events::event_for(std::uint64_t holder, const ipc_handle& handle,
                                     CUcontext context, CUevent& event) {
  const auto kept = opened_.find(holder);
  if (kept != opened_.end() && kept->second.handle == handle) {
    event = kept->second.event.get();
    return {};
  }
  CUipcEventHandle raw{};
  static_assert(sizeof(raw) == sizeof(ipc_handle));
  std::memcpy(&raw, handle.data(), sizeof raw);
  cuda::event made;
  if (const CUresult status = cuda::event::open_ipc(cu_, context, raw, made);
      status != CUDA_SUCCESS) {
    if (kept != opened_.end()) opened_.erase(kept);  // a holder keeps one event, its newest
    return {kOpenCall, status};
  }
  event = made.get();
  opened_.insert_or_assign(holder, opened{handle, std::move(made)});
  return {};
}

void holder_events::forget(std::uint64_t holder) noexcept {
  opened_.erase(holder);
}

}  // namespace gpumem::daemon
