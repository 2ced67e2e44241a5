#pragma once
/// @file
/// @brief Builds the pools a configuration describes, adding one CUDA pool per visible device
/// when the configuration names none and the driver is there.

#include <memory>
#include <vector>

#include "config/config.hpp"
#include "memory/pool.hpp"
#include "memory/reservation.hpp"
#include "sync/signal_page.hpp"

namespace gpumem::daemon {

/// @throws config_error when a pool cannot be made (with the pool's name and the cause).
std::vector<std::unique_ptr<pool>> make_pools(const daemon_config& config);

/// @brief How VMM reservations are made here; empty when CUDA is unavailable.
reservation_maker make_reservation_maker();

/// @brief How signal pages (for stream-ordered and device locks) are made; empty without CUDA.
signal_page_maker make_signal_page_maker();

}  // namespace gpumem::daemon
