#pragma once
/// @file
/// @brief The interprocess events that a CUDA pool's holders mark their releases with, opened
/// once per client and kept while the client's connection lasts.
///
/// A client's library records one interprocess event per pool for every release and sends its
/// handle with the release (client/src/cuda_imports.cpp). The pool's release stream waits on it,
/// and a wait captures the event as it was last recorded when the wait is queued, which is
/// before the release is answered and so before the client records it again. One opening of the
/// handle therefore serves every release the client sends with it. Opened and destroyed on each
/// release instead, it cost ~3 us of a release that takes 15-27 us end to end on an H200.
///
/// An event must not be used once the process that made it destroyed it (the driver's terms),
/// and nothing tells the daemon when a client does that, so a kept event only serves releases
/// that carry the same handle from the same client, and is let go once the client's connection
/// ends: a library keeps its markers as long as its session, and a new session is a new client.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "gpumem/shared/cuda/driver.hpp"
#include "gpumem/shared/cuda/handles.hpp"
#include "memory/pool.hpp"

namespace gpumem::daemon {

class holder_events {
 public:
  /// @param context the pool's, in which the events are opened; current on each call.
  holder_events(const cuda::driver_api& driver, CUcontext context) noexcept
      : cu_(driver), context_(context) {}

  /// @brief The event that @p client's release marks with @p handle: the one kept from the
  /// client's earlier release when the handle is the same, otherwise opened now, and kept in
  /// place of the client's earlier one.
  /// @return the driver's status; on failure @p client has no event kept and @p event is unset.
  CUresult open(std::uint64_t client, const ipc_handle& handle, CUevent& event);
  /// @brief Lets go of the event kept for @p client, if any.
  void forget(std::uint64_t client) noexcept;
  /// @brief Events kept, one per client at most.
  std::size_t kept() const noexcept { return opened_.size(); }

 private:
  struct opened {
    ipc_handle handle;
    cuda::event event;
  };

  const cuda::driver_api& cu_;
  CUcontext context_;
  std::unordered_map<std::uint64_t, opened> opened_;
};

}  // namespace gpumem::daemon
