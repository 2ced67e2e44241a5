#pragma once
/// @file
/// @brief Makes pools: the list a configuration describes (adding one CUDA pool per visible
/// device when it names none and the driver is there), and a maker of instances of them (the
/// memory book makes one instance per tenant of each configured pool).

#include <functional>
#include <memory>
#include <vector>

#include "config/config.hpp"
#include "memory/family_room.hpp"
#include "memory/pool.hpp"
#include "memory/reservation.hpp"
#include "sync/signal_page.hpp"

namespace gpumem::daemon {

/// @brief Makes one instance of a configured pool under the id given, counting what it keeps
/// beside its allocations (a CUDA pool's spare blocks) in the configured pool's room, which
/// outlives the instance.
/// @throws what the backend throws (std::system_error, cuda::cuda_error).
using pool_maker =
    std::function<std::unique_ptr<pool>(std::uint32_t id, const pool_config&, family_room&)>;

/// @brief The configured pools, with one CUDA pool per visible device added when the
/// configuration names none. @throws config_error when a CUDA pool is named without CUDA.
std::vector<pool_config> resolve_pools(const daemon_config& config);

/// @brief Host pools always; CUDA pools where the driver is there.
pool_maker make_pool_maker();

/// @brief How VMM reservations are made here; empty when CUDA is unavailable.
reservation_maker make_reservation_maker();

/// @brief Re-adoption of a pool instance a previous daemon made, from its kept fd: a host pool
/// whole (it allocates again), a CUDA pool as an adopted_device_pool. Needs no CUDA call.
/// @throws std::system_error
std::unique_ptr<pool> adopt_pool(std::uint32_t id, const pool_config& config, unique_fd fd);

/// @brief How kept reservations and signal pages are adopted here; empty without CUDA.
reservation_adopter make_reservation_adopter();
signal_page_adopter make_signal_page_adopter();

/// @brief How signal pages (for stream-ordered and device locks) are made; empty without CUDA.
signal_page_maker make_signal_page_maker();

}  // namespace gpumem::daemon
