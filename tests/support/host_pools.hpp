#pragma once
// The pool maker of the daemon-side tests that need no CUDA: every instance a host pool.

#include <memory>

#include "memory/host_pool.hpp"
#include "memory/pool_factory.hpp"

namespace gpumem::daemon {

inline std::unique_ptr<pool> host_pools(std::uint32_t id, const pool_config& config, family_room&) {
  return std::make_unique<host_pool>(id, config);
}

}  // namespace gpumem::daemon
