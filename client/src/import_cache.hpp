#pragma once
/// @file
/// @brief What a session imported, host and CUDA alike: each pool of gpumemd's it touches,
/// asked for and imported once and kept until the session ends, and (CUDA) the pointers
/// imported from those pools.

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "gpumem/gpumem.hpp"
#include "gpumem/proto/messages.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::detail {

class transport;
class cuda_imports;
struct cuda_pool_import;

/// A pool of gpumemd's in this process.
struct imported_pool {
  imported_pool() noexcept;
  imported_pool(imported_pool&&) noexcept;
  ~imported_pool();  // where cuda_pool_import is complete (import_cache.cpp)

  int device = kHost;
  unique_fd memfd;                         ///< host pools: each allocation is mapped from it
  std::unique_ptr<cuda_pool_import> cuda;  ///< CUDA pools: the driver's import, its events
};

class import_cache {
 public:
  explicit import_cache(transport& link);
  ~import_cache();
  import_cache(const import_cache&) = delete;
  import_cache& operator=(const import_cache&) = delete;

  /// @brief The pool, asked of the daemon and imported on first use.
  /// @throws Error(not_supported) for a CUDA pool where this process has no CUDA.
  imported_pool& pool(std::uint32_t pool_id);
  /// @brief The device pointer of a CUDA allocation of @p home, imported once however often
  /// it is opened; @p stream is made to wait for the allocation.
  void* import_device(imported_pool& home, const proto::allocation_reply& grant, Stream stream);
  /// @brief Lets go of one reference to a CUDA allocation after the work on @p last_use,
  /// and puts the event the daemon waits on into @p request (see cuda_imports::release).
  void release_device(std::uint64_t alloc_id, Stream last_use, proto::release_request& request);

 private:
  /// The CUDA side, made on first use; throws Error(not_supported) where CUDA is unavailable.
  cuda_imports& cuda();

  transport& link_;
  std::mutex pools_mutex_;
  std::unordered_map<std::uint32_t, imported_pool> pools_;
  std::once_flag cuda_made_;
  std::unique_ptr<cuda_imports> cuda_;  ///< declared after pools_: its pointers go first
};

}  // namespace gpumem::detail
