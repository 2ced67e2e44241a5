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
