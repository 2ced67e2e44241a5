#pragma once
/// @file
/// @brief The interprocess events that a CUDA pool's holders mark their releases with, opened
/// once per client and kept while the client's connection lasts.
///
/// The wire contract (proto::release_request) has a client keep the event behind a handle it
/// sends, undestroyed, for as long as its connection lasts, and record it anew for each release.
/// A release stream's wait captures the event as it was last recorded when the wait is queued,
/// which is before the release is answered and so before the client records it again. One
/// opening of the handle therefore serves every release the client sends with it while its
/// connection lasts (the stock library records one event per pool, client/src/cuda_imports.cpp).
/// Opened and destroyed on each release instead, it cost 2-4 us of a release that takes
/// 15-27 us end to end on an H200.
///
/// Equal handle bytes alone do not prove the same event: a destroyed event's handle can come
/// back for another, and the driver forbids using an event its maker destroyed. So a kept event
/// serves only the client that sent it, and goes when that client's connection ends. A client
/// that breaks the contract may have a block freed while its own work on it still runs, as if it
/// had released too early; only clients of its access class, who share its pool, can be handed
/// that block.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "gpumem/shared/cuda/driver.hpp"
#include "gpumem/shared/cuda/handles.hpp"
#include "memory/failed_call.hpp"
#include "memory/pool.hpp"

namespace gpumem::daemon {

class holder_events {
 public:
  /// The failed call of a handle that cannot be opened: the client's doing, not the daemon's.
  static constexpr const char kOpenCall[] = "cuIpcOpenEventHandle";

  explicit holder_events(const cuda::driver_api& driver) noexcept : cu_(driver) {}

  /// @brief Queues on @p stream a wait for the work that @p holder's release marked with
  /// @p handle: through the event kept for @p holder when it sent this handle before, otherwise
  /// through one opened now in @p context and kept in place of its earlier one.
  /// @param holder the releasing client (the ledger's id).
  /// @return the call that failed, if one did; @p holder then has no event kept, so that its
  /// next release opens its handle afresh.
  failed_call wait_on(std::uint64_t holder, const ipc_handle& handle, CUcontext context,
                      CUstream stream);
  /// @brief Lets go of the event kept for @p holder, if any.
  void forget(std::uint64_t holder) noexcept;
  /// @brief Events kept, one per holder at most.
  std::size_t kept() const noexcept { return opened_.size(); }

 private:
  struct opened {
    ipc_handle handle;
    cuda::event event;
  };

  /// The event kept for @p holder's @p handle, opened now if it is not the one kept.
  failed_call event_for(std::uint64_t holder, const ipc_handle& handle, CUcontext context,
                        CUevent& event);

  const cuda::driver_api& cu_;
  std::unordered_map<std::uint64_t, opened> opened_;
};

}  // namespace gpumem::daemon
