#include "config/reload_plan.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace gpumem::daemon {

namespace {
std::string mode_text(mode_t mode) {
  return fmt::format("{:04o}", static_cast<unsigned>(mode));
}

const pool_config* pool_named(const std::vector<pool_config>& pools, const std::string& name) {
  const auto found = std::ranges::find(pools, name, &pool_config::name);
  return found == pools.end() ? nullptr : &*found;
}

/// The keys in which two configurations of one pool differ: "size 1073741824 -> 2147483648".
std::vector<std::string> pool_differences(const pool_config& before, const pool_config& after) {
  std::vector<std::string> differences;
  const auto compare = [&](const char* key, const auto& old_value, const auto& new_value) {
    if (old_value != new_value) {
      differences.push_back(
          fmt::format("{} {} -> {}", key, fmt::join(old_value, ","), fmt::join(new_value, ",")));
    }
  };
  compare("device", std::vector{before.device}, std::vector{after.device});
  compare("size", std::vector{before.size}, std::vector{after.size});
  compare("release_threshold", std::vector{before.release_threshold},
          std::vector{after.release_threshold});
  compare("peer_access", before.peer_access, after.peer_access);
  return differences;
}

void plan_pools(const daemon_config& running, const daemon_config& wanted, reload_plan& plan) {
  plan.next.pools = running.pools;
  for (const pool_config& pool : wanted.pools) {
    const pool_config* existing = pool_named(running.pools, pool.name);
    if (existing == nullptr) {
      plan.next.pools.push_back(pool);
      plan.new_pools.push_back(pool);
      continue;
    }
    if (const auto differences = pool_differences(*existing, pool); !differences.empty()) {
      plan.not_applied.push_back(fmt::format(
          "pools: pool '{}' ({}): an existing pool cannot change while gpumemd runs, its "
          "memory is laid out and its descriptor held by clients under these settings; "
          "restart gpumemd to apply",
          pool.name, fmt::join(differences, ", ")));
    }
  }
  for (const pool_config& pool : running.pools) {
    if (pool_named(wanted.pools, pool.name) == nullptr) {
      plan.not_applied.push_back(fmt::format(
          "pools: pool '{}' is no longer configured but stays: clients may hold its memory "
          "and its descriptor; restart gpumemd to remove it",
          pool.name));
    }
  }
}
}  // namespace

reload_plan plan_reload(const daemon_config& running, const daemon_config& wanted) {
  reload_plan plan;
  plan.next = wanted;
  if (wanted.socket_path != running.socket_path) {
    plan.next.socket_path = running.socket_path;
    plan.not_applied.push_back(fmt::format(
        "socket: '{}' -> '{}' cannot change while gpumemd runs (clients find it by its path); "
        "restart gpumemd to apply",
        running.socket_path, wanted.socket_path));
  }
  if (wanted.log_level != running.log_level) {
    plan.changes.push_back(fmt::format("log_level {} -> {}", running.log_level, wanted.log_level));
  }
  if (wanted.socket_mode != running.socket_mode) {
    plan.changes.push_back(fmt::format("socket_mode {} -> {}", mode_text(running.socket_mode),
                                       mode_text(wanted.socket_mode)));
  }
  if (wanted.access != running.access) plan.changes.emplace_back("access");
  if (wanted.quotas != running.quotas) plan.changes.emplace_back("quotas");
  if (wanted.max_output_bytes != running.max_output_bytes) {
    plan.changes.push_back(fmt::format("max_output_bytes {} -> {}", running.max_output_bytes,
                                       wanted.max_output_bytes));
  }
  if (wanted.max_connections != running.max_connections) {
    plan.changes.push_back(
        fmt::format("max_connections {} -> {}", running.max_connections, wanted.max_connections));
  }
  if (wanted.frame_deadline != running.frame_deadline) {
    plan.changes.push_back(fmt::format("frame_deadline {}ms -> {}ms",
                                       running.frame_deadline.count(),
                                       wanted.frame_deadline.count()));
  }
  if (wanted.sleep_memory_kept != running.sleep_memory_kept) {
    plan.changes.push_back(fmt::format("sleep_memory_kept {} -> {}", running.sleep_memory_kept,
                                       wanted.sleep_memory_kept));
  }
  if (wanted.fd_store_max != running.fd_store_max) {
    plan.changes.push_back(
        fmt::format("fd_store_max {} -> {}", running.fd_store_max, wanted.fd_store_max));
  }
  plan_pools(running, wanted, plan);
  return plan;
}

}  // namespace gpumem::daemon
