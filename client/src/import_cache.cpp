#include "import_cache.hpp"

#include <unistd.h>

#include "transport.hpp"
#ifdef GPUMEM_WITH_CUDA
#include "cuda_context.hpp"
#include "cuda_imports.hpp"
#else
namespace gpumem::detail {
// Built without CUDA, nothing is ever imported into a driver.
struct cuda_pool_import {};
class cuda_imports {};
}  // namespace gpumem::detail
#endif

namespace gpumem::detail {

imported_pool::imported_pool() noexcept = default;
imported_pool::imported_pool(imported_pool&&) noexcept = default;
imported_pool::~imported_pool() = default;

import_cache::import_cache(transport& link) : link_(link) {}
import_cache::~import_cache() = default;

imported_pool& import_cache::pool(std::uint32_t pool_id) {
  std::lock_guard lock(pools_mutex_);
  if (const auto found = pools_.find(pool_id); found != pools_.end()) return found->second;
  std::vector<unique_fd> fds;
  const auto reply = link_.call<proto::pool_reply>(proto::message_type::get_pool,
                                                   proto::get_pool_request{pool_id, 0}, &fds);
  if (fds.size() != 1 || reply.pool_id != pool_id) {
    throw Error(errc::unexpected_handle,
                "gpumemd sent no handle for pool " + std::to_string(pool_id));
  }
  imported_pool entry;
  entry.device = reply.device;
  if (reply.device == proto::kHostDevice) {
    entry.memfd = std::move(fds[0]);
  } else {
#ifdef GPUMEM_WITH_CUDA
    entry.cuda = cuda().import_pool(reply, fds[0].get());
#else
    cuda();  // throws
#endif
  }
  return pools_.emplace(pool_id, std::move(entry)).first->second;
}

#ifdef GPUMEM_WITH_CUDA
cuda_imports& import_cache::cuda() {
  std::call_once(cuda_made_, [this] {
    cuda_ = std::make_unique<cuda_imports>(cuda_driver(), link_.daemon_uid() == ::geteuid());
  });
  return *cuda_;
}

void* import_cache::import_device(imported_pool& home, const proto::allocation_reply& grant,
                                  Stream stream) {
  return reinterpret_cast<void*>(cuda().import(*home.cuda, grant, stream));
}

void import_cache::release_device(std::uint64_t alloc_id, Stream last_use,
                                  proto::release_request& request) {
  cuda().release(alloc_id, last_use, request);
}
#else
cuda_imports& import_cache::cuda() {
  throw Error(errc::not_supported, "this libgpumem was built without CUDA support");
}

void* import_cache::import_device(imported_pool&, const proto::allocation_reply&, Stream) {
  cuda();  // throws
  return nullptr;
}

void import_cache::release_device(std::uint64_t, Stream, proto::release_request&) {
  cuda();
}
#endif

}  // namespace gpumem::detail
