#include "memory/holder_events.hpp"

#include <cstring>

namespace gpumem::daemon {

CUresult holder_events::open(std::uint64_t client, const ipc_handle& handle, CUevent& event) {
  event = nullptr;
  const auto kept = opened_.find(client);
  if (kept != opened_.end() && kept->second.handle == handle) {
    event = kept->second.event.get();
    return CUDA_SUCCESS;
  }
  CUipcEventHandle raw{};
  static_assert(sizeof(raw) == sizeof(ipc_handle));
  std::memcpy(&raw, handle.data(), sizeof raw);
  cuda::event made;
  if (const CUresult status = cuda::event::open_ipc(cu_, context_, raw, made);
      status != CUDA_SUCCESS) {
    if (kept != opened_.end()) opened_.erase(kept);  // a client keeps one event, the newest
    return status;
  }
  if (kept != opened_.end()) {
    kept->second = opened{handle, std::move(made)};
    event = kept->second.event.get();
  } else {
    event = opened_.emplace(client, opened{handle, std::move(made)}).first->second.event.get();
  }
  return CUDA_SUCCESS;
}

void holder_events::forget(std::uint64_t client) noexcept {
  opened_.erase(client);
}

}  // namespace gpumem::daemon
