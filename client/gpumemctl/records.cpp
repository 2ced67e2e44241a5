#include "records.hpp"

#include <map>

namespace gpumemctl {

std::string device_name(int device) {
  return device == gpumem::kHost ? "host" : "cuda:" + std::to_string(device);
}

std::vector<listed_allocation> list_allocations(gpumem::Client& client) {
  std::map<std::uint32_t, std::string> pool_names;
  for (const auto& pool : client.stats().pools) pool_names.emplace(pool.id, pool.name);
  std::map<std::uint64_t, ClientInfo> owners;
  for (auto& each : client.clients()) owners.emplace(each.id, std::move(each));
  std::vector<listed_allocation> all;
  for (auto& allocation : client.allocations()) {
    listed_allocation listed{std::move(allocation), {}, {}};
    if (const auto pool = pool_names.find(listed.pool); pool != pool_names.end()) {
      listed.pool_name = pool->second;
    }
    if (const auto owner = owners.find(listed.owner_client); owner != owners.end()) {
      listed.owner = owner->second;
    }
    all.push_back(std::move(listed));
  }
  return all;
}

std::string kind_name(gpumem::SyncKind kind) {
  switch (kind) {
    case gpumem::SyncKind::lock:
      return "lock";
    case gpumem::SyncKind::barrier:
      return "barrier";
    case gpumem::SyncKind::channel:
      return "channel";
  }
  return "?";
}

std::string sync_state(const SyncInfo& sync) {
  if (sync.corrupt) return "corrupt";
  if (sync.not_recoverable) return "not recoverable";
  if (sync.owner_died) return "owner died";
  if (sync.broken) return "broken";
  if (sync.kind == gpumem::SyncKind::lock) return sync.held ? "held" : "free";
  return "ok";
}

json visible_pid(std::uint32_t pid) {
  return pid == 0 ? json(nullptr) : json(pid);
}

std::string pid_or_note(const json& pid) {
  return pid.is_null() ? "- (not in gpumemd's PID namespace)" : pid.dump();
}

std::string reservation_outcome(const named_reservation_status& status) {
  std::string line = "reservation '" + status.name + "' " + gpumem::to_string(status.state);
  switch (status.state) {
    case gpumem::ReservationState::asleep:
      // A discarding sleep keeps nothing: the reservation wakes zeroed.
      if (status.host_bytes == 0) return line + ": " + bytes_text(status.committed) + " discarded";
      return line + ": " + bytes_text(status.host_bytes) + " on the host";
    case gpumem::ReservationState::awake:
      return line + ": version " + std::to_string(status.version) + ", " +
             bytes_text(status.committed);
    case gpumem::ReservationState::draining:
    case gpumem::ReservationState::lost:
      break;
  }
  return line;
}

}  // namespace gpumemctl
