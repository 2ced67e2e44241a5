#pragma once
/// @file
/// @brief What a reload (SIGHUP) changes: the running configuration against the one just read,
/// key by key, split into what gpumemd applies live and what waits for a restart.
///
/// Live: log_level, socket_mode, access (and open_across_users), quotas, max_output_bytes,
/// max_connections, frame_deadline, sleep_memory_kept, fd_store_max, and pools with new names
/// (or a pool only the kept state named, configured again: see memory_book::add_pool). New requests
/// see the new values; nothing that exists is taken back (a client over a lowered quota keeps
/// what it owns and is refused more) but host copies kept beyond a lowered sleep_memory_kept. For a
/// restart: the socket path (clients find the daemon by it), an existing pool's device, size,
/// release_threshold and peer_access (its memory is laid out and its descriptor is in clients'
/// hands under them), and a pool's removal (clients may hold its memory and its descriptor; a
/// restarted daemon lets it go once nothing lives in it).

#include <string>
#include <vector>

#include "config/config.hpp"

namespace gpumem::daemon {

struct reload_plan {
  /// The configuration to run: the wanted one, with the running values of what cannot change
  /// live.
  daemon_config next;
  /// What changes besides new pools, one short item each: "log_level info -> debug", "quotas".
  std::vector<std::string> changes;
  /// What waits for a restart, each naming the key and the reason.
  std::vector<std::string> not_applied;
  /// Pools to make: in @ref next already, taken out again by the caller where making one fails.
  std::vector<pool_config> new_pools;
};

/// @param running the configuration in force, its pools resolved (resolve_pools).
/// @param wanted the configuration just read, its pools resolved the same way.
reload_plan plan_reload(const daemon_config& running, const daemon_config& wanted);

}  // namespace gpumem::daemon
