#pragma once
/// @file
/// @brief The CUDA side of a session: what importing a pool made in this process (kept by the
/// session's import cache, import_cache.hpp), the pointers imported from such pools (each
/// once, however often a buffer is opened), and the events that order this process's work
/// against the daemon's.

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "gpumem/proto/messages.hpp"
#include "gpumem/shared/cuda/driver.hpp"
#include "gpumem/shared/cuda/handles.hpp"

namespace gpumem::detail {

/// What importing one CUDA pool made in this process. Members in the order they are made:
/// they are freed in reverse, the context last.
struct cuda_pool_import {
  struct release_marker {
    cuda::event event;  ///< interprocess, in the pool's context
    CUipcEventHandle handle{};
  };

  cuda::primary_context context;
  cuda::memory_pool pool;
  cuda::event ready;    ///< the daemon's ready event, opened here
  cuda::stream bridge;  ///< in the pool's context: relays ordering to and from other devices
  cuda::event bridged;  ///< recorded on the bridge, waited for by streams of other devices
  release_marker marker;
  std::vector<CUdevice> peers;  ///< other devices this process was given access from
};

class cuda_imports {
 public:
  /// @param interprocess_events whether this process and the daemon share interprocess events:
  /// the driver keeps them in a /dev/shm segment of mode 0600, so only processes of one uid
  /// can (see daemon/memory/memory_book.hpp). Without them the daemon answers a grant once the
  /// allocation is done, and a release waits here for the work queued before it.
  cuda_imports(const cuda::driver_api& driver, bool interprocess_events)
      : cu_(driver), interprocess_events_(interprocess_events) {}
  cuda_imports(const cuda_imports&) = delete;
  cuda_imports& operator=(const cuda_imports&) = delete;

  /// @brief Imports a pool from @p fd (the caller closes it) and opens its ready event. A
  /// failure leaves nothing behind: what was made for the pool so far is freed.
  std::unique_ptr<cuda_pool_import> import_pool(const proto::pool_reply& pool, int fd);

  /// @brief The pointer of an allocation of @p home in this process, imported on first use;
  /// @p stream is made to wait for the allocation. @p home must outlive the pointer's import.
  CUdeviceptr import(cuda_pool_import& home, const proto::allocation_reply& grant, CUstream stream);

  /// @brief Lets go of one reference after the work queued on @p stream: the last reference
  /// frees the import; every release records the release event, whose handle goes in
  /// @p request for the daemon to wait on. The caller sends @p request before the next
  /// release: the daemon must see this record, not a later one.
  void release(std::uint64_t alloc_id, CUstream stream, proto::release_request& request);

 private:
  using release_marker = cuda_pool_import::release_marker;
  struct imported_pointer {
    CUdeviceptr pointer;
    cuda_pool_import* home;
    std::uint32_t references;
    /// Streams that used earlier references: the final free waits for each of them.
    std::vector<cuda::event> earlier_uses;
  };

  /// The context @p stream belongs to; @p home's for the default stream.
  CUcontext context_of(CUstream stream, const cuda_pool_import& home);
  /// Lets kernels on @p stream's device use @p home's memory (access is not inherited from
  /// the daemon's pool: each importer sets it for its own device).
  void grant_access_from(cuda_pool_import& home, CUstream stream, CUcontext stream_context);
  /// Whether everything @p home_event (of the pool's context) was last recorded after is done.
  bool completed(cuda_pool_import& home, CUevent home_event);
  /// Makes @p stream wait for @p home_event, an event of the pool's context.
  void wait_for(cuda_pool_import& home, CUevent home_event, CUstream stream,
                CUcontext stream_context);
  /// Records @p home_event (of the pool's context) after the work queued on @p stream.
  void record_after(cuda_pool_import& home, CUevent home_event, CUstream stream,
                    CUcontext stream_context);
  /// A plain event of @p context, to carry ordering from its streams to the bridge.
  CUevent crossing_for(CUcontext context);
  const release_marker& marker_for(cuda_pool_import& home);

  const cuda::driver_api& cu_;
  const bool interprocess_events_;
  std::mutex mutex_;  ///< guards the maps below and the pools' peers and markers
  /// Pointers still here when this object goes belong to buffers that were never released
  /// (a failed release, a forked child's copies): the driver reclaims them with the process.
  std::unordered_map<std::uint64_t, imported_pointer> pointers_;
  std::unordered_map<CUcontext, cuda::event> crossings_;
};

}  // namespace gpumem::detail
