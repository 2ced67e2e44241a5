#include "records.hpp"

namespace gpumemctl {

std::string device_name(int device) {
  return device == gpumem::kHost ? "host" : "cuda:" + std::to_string(device);
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
  if (sync.kind == gpumem::SyncKind::lock) return sync.owner_pid != 0 ? "held" : "free";
  return "ok";
}

std::string driver_bytes(const json& value, const PoolStats& pool) {
  return pool.device == gpumem::kHost ? "-" : bytes(value, pool);
}

}  // namespace gpumemctl
