#pragma once
/// @file
/// @brief What gpumemctl shows of each record: one list of fields per record type, which both
/// the table and the JSON of its subcommands print.

#include <optional>
#include <string>
#include <vector>

#include "field.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"

namespace gpumemctl {

using gpumem::AllocationInfo;
using gpumem::ClientInfo;
using gpumem::PoolStats;
using gpumem::ReservationInfo;
using gpumem::ReservationStatus;
using gpumem::Stats;
using gpumem::SyncInfo;
using gpumem::UsageInfo;

/// @brief `status` shows the daemon's counters and the socket they came over.
struct daemon_status : Stats {
  std::string socket;
};

/// @brief `allocations` names the pool, and the owner's process as `clients` lists it.
struct listed_allocation : AllocationInfo {
  std::string pool_name;            ///< "" when no pool of that id is listed
  std::optional<ClientInfo> owner;  ///< nullopt when it let go, or is not listed to this user
};

/// @brief The daemon's allocations with their pool names and owners: `stats` and `clients`
/// joined to `allocations` (three round trips).
std::vector<listed_allocation> list_allocations(gpumem::Client& client);

/// @brief `clients` marks the row of the gpumemctl that asks.
struct listed_client : ClientInfo {
  bool self = false;
};

/// @brief `reservation-status`, `sleep` and `wake` name the reservation they asked about.
struct named_reservation_status : ReservationStatus {
  std::string name;
};

/// @brief "host" or "cuda:N".
std::string device_name(int device);
std::string kind_name(gpumem::SyncKind kind);
/// @brief "corrupt", "not recoverable", "owner died", "broken", "held", "free" or "ok".
std::string sync_state(const SyncInfo& sync);

/// @brief A pid from the kernel for JSON: null where gpumemd cannot see the process (it lives
/// outside gpumemd's PID namespace, which gives it pid 0 there).
json visible_pid(std::uint32_t pid);
/// @brief Its table cell: the pid, or "-" with the reason.
std::string pid_or_note(const json& pid);

template <auto device_member, class Record>
json device_of(const Record& record) {
  return device_name(record.*device_member);
}

/// @brief An owner that let go while others still hold the object: null in JSON.
template <class Record>
std::string gone_if_absent(const json& owner, const Record& /*record*/) {
  return owner.is_null() ? "(gone)" : owner.dump();
}

/// @brief What a finished sleep or wake left, in one line: "reservation 'w' asleep: 1.0 GiB on
/// the host".
std::string reservation_outcome(const named_reservation_status& status);

template <class Record>
json state_of(const Record& record) {
  return gpumem::to_string(record.state);
}

/// @brief The driver's counters exist for CUDA pools only: null for a host pool.
template <auto counter>
json driver_counter(const PoolStats& pool) {
  return pool.device == gpumem::kHost ? json(nullptr) : json(pool.*counter);
}

inline constexpr field<daemon_status> kStatusFields[] = {
    {"daemon pid", "daemon_pid", member<&Stats::daemon_pid>},
    {"socket", "socket", member<&daemon_status::socket>},
    {"uptime", "uptime_ms", member<&Stats::uptime_ms>, duration},
    {"cuda backend", "cuda", member<&Stats::cuda>,
     [](const json& cuda, const daemon_status&) -> std::string {
       return cuda.get<bool>() ? "yes" : "no";
     }},
    {"mps", "mps", member<&Stats::mps>,
     [](const json& mps, const daemon_status& status) -> std::string {
       if (!status.cuda) return "-";
       return mps.get<bool>() ? "active" : "not active";
     }},
    {"state kept", "state_kept", member<&Stats::state_kept>,
     [](const json& kept, const daemon_status&) -> std::string {
       return kept.get<bool>() ? "yes (systemd fd store: a restart loses nothing)"
                               : "no (no systemd fd store: a restart starts clean)";
     }},
    {"ipc events live", "ipc_events_live", member<&Stats::ipc_events_live>},
    {"pools", "pools", [](const daemon_status& status) -> json { return status.pools.size(); }},
    {"clients", "clients", member<&Stats::clients>},
    {"allocations", "allocations", member<&Stats::allocations>},
};

inline constexpr field<PoolStats> kPoolFields[] = {
    {"POOL", "name", member<&PoolStats::name>},
    {"ID", "id", member<&PoolStats::id>},
    {"DEVICE", "device", device_of<&PoolStats::device>},
    {"LIMIT", "size_limit", member<&PoolStats::size_limit>, bytes},
    {"IN USE", "bytes_in_use", member<&PoolStats::bytes_in_use>, bytes},
    {"RESERVED", "bytes_reserved", member<&PoolStats::bytes_reserved>, bytes},
    {"HIGH", "bytes_in_use_high", member<&PoolStats::bytes_in_use_high>, bytes},
    {"ALLOCATIONS", "allocations", member<&PoolStats::allocations>},
    {"DRIVER RESERVED", "driver_reserved_current",
     driver_counter<&PoolStats::driver_reserved_current>, bytes},
    {"DRIVER HIGH", "driver_reserved_high", driver_counter<&PoolStats::driver_reserved_high>,
     bytes},
    {"DRIVER USED", "driver_used_current", driver_counter<&PoolStats::driver_used_current>, bytes},
    {"", "driver_used_high", driver_counter<&PoolStats::driver_used_high>},
};
/// `stats`: the daemon's books first, then what the driver says of the same pool.
inline constexpr auto kStatsColumns =
    select(kPoolFields, {"POOL", "DEVICE", "IN USE", "RESERVED", "HIGH", "LIMIT", "ALLOCATIONS",
                         "DRIVER USED", "DRIVER RESERVED", "DRIVER HIGH"});
/// `pools`: how each pool is configured and how full it is.
inline constexpr auto kPoolsColumns =
    select(kPoolFields, {"ID", "POOL", "DEVICE", "LIMIT", "IN USE", "RESERVED", "ALLOCATIONS"});

inline constexpr field<listed_client> kClientFields[] = {
    {"ID", "id", member<&ClientInfo::id>,
     [](const json& id, const listed_client& client) {
       return id.dump() + (client.self ? "*" : "");
     }},
    {"", "self", member<&listed_client::self>},
    {"PID", "pid", [](const listed_client& client) { return visible_pid(client.pid); },
     [](const json& pid, const listed_client&) { return pid_or_note(pid); }},
    // What the client says of itself: shown for operators matching a container's processes,
    // never trusted.
    {"OWN PID (CLIENT-REPORTED)", "reported_pid", member_or_null<&ClientInfo::reported_pid>,
     dash_if_absent},
    {"UID", "uid", member<&ClientInfo::uid>},
    {"", "gid", member<&ClientInfo::gid>},
    {"LABEL", "label", member<&ClientInfo::label>},
    {"OWNED", "allocations_owned", member<&ClientInfo::allocations_owned>},
    {"OPENED", "allocations_opened", member<&ClientInfo::allocations_opened>},
    {"BYTES OWNED", "bytes_owned", member<&ClientInfo::bytes_owned>, bytes},
    {"CONNECTED", "connected_ms", member<&ClientInfo::connected_ms>, duration},
};

/// @brief A quota for JSON: the number, or null for none.
template <auto limit_member>
json limit_of(const UsageInfo& usage) {
  const auto& limit = usage.*limit_member;
  return limit ? json(*limit) : json(nullptr);
}

/// @brief "used / limit" for the table, the limit "-" when there is none.
template <auto limit_member, bool in_bytes>
std::string against(const json& used, const UsageInfo& usage) {
  const auto& limit = usage.*limit_member;
  const auto text = [](std::uint64_t value) {
    return in_bytes ? bytes_text(value) : std::to_string(value);
  };
  return text(used.get<std::uint64_t>()) + " / " + (limit ? text(*limit) : std::string("-"));
}

inline constexpr field<UsageInfo> kUsageFields[] = {
    {"UID", "uid", member<&UsageInfo::uid>},
    {"CONNECTIONS", "connections", member<&UsageInfo::connections>,
     against<&UsageInfo::connections_limit, false>},
    {"HOST BYTES", "host_bytes", member<&UsageInfo::host_bytes>,
     against<&UsageInfo::bytes_limit, true>},
    {"GPU BYTES", "device_bytes", member<&UsageInfo::device_bytes>,
     against<&UsageInfo::bytes_limit, true>},
    {"ALLOCATIONS", "allocations", member<&UsageInfo::allocations>,
     against<&UsageInfo::allocations_limit, false>},
    {"SYNC OBJECTS", "sync_objects", member<&UsageInfo::sync_objects>,
     against<&UsageInfo::sync_objects_limit, false>},
    {"", "connections_limit", limit_of<&UsageInfo::connections_limit>},
    {"", "bytes_limit", limit_of<&UsageInfo::bytes_limit>},
    {"", "allocations_limit", limit_of<&UsageInfo::allocations_limit>},
    {"", "sync_objects_limit", limit_of<&UsageInfo::sync_objects_limit>},
};

/// @brief A field of the owner's row of `clients`: null when there is none.
template <auto client_member>
json owner_detail(const listed_allocation& allocation) {
  return allocation.owner ? json((*allocation.owner).*client_member) : json(nullptr);
}

inline constexpr field<listed_allocation> kAllocationFields[] = {
    {"ID", "id", member<&AllocationInfo::id>},
    {"NAME", "name", member_or_null<&AllocationInfo::name>, dash_if_absent},
    {"SIZE", "size", member<&AllocationInfo::size>, bytes},
    {"POOL", "pool_name",
     [](const listed_allocation& allocation) -> json {
       return allocation.pool_name.empty() ? json(nullptr) : json(allocation.pool_name);
     },
     dash_if_absent},
    {"", "pool", member<&AllocationInfo::pool>},
    {"OWNER", "owner_client", member_or_null<&AllocationInfo::owner_client>, gone_if_absent},
    {"PID", "owner_pid", owner_detail<&ClientInfo::pid>, dash_if_absent},
    {"LABEL", "owner_label", owner_detail<&ClientInfo::label>, dash_if_absent},
    {"HOLDERS", "holders", member<&AllocationInfo::holders>},
};

inline constexpr field<ReservationInfo> kReservationFields[] = {
    {"ID", "id", member<&ReservationInfo::id>},
    {"NAME", "name", member_or_null<&ReservationInfo::name>, dash_if_absent},
    {"DEVICE", "device", device_of<&ReservationInfo::device>},
    {"STATE", "state", state_of<ReservationInfo>},
    {"VERSION", "version", member<&ReservationInfo::version>},
    {"DRAFT", "draft_version", member_or_null<&ReservationInfo::draft_version>, dash_if_absent},
    {"COMMITTED", "committed", member<&ReservationInfo::committed>, bytes},
    {"MAX", "max_size", member<&ReservationInfo::max_size>, bytes},
    {"OWNER", "owner_client", member_or_null<&ReservationInfo::owner_client>, gone_if_absent},
    {"HOLDERS", "holders", member<&ReservationInfo::holders>},
    // Holders on the current version / on an older one: "3/1" while one has not refreshed.
    {"CURRENT/BEHIND", "holders_current", member<&ReservationInfo::holders_current>,
     [](const json& current, const ReservationInfo& reservation) {
       return current.dump() + "/" + std::to_string(reservation.holders_behind);
     }},
    {"", "holders_behind", member<&ReservationInfo::holders_behind>},
    {"OLDEST MAPPED", "oldest_mapped", member_or_null<&ReservationInfo::oldest_mapped>,
     dash_if_absent},
    {"RETAINED", "retained_bytes", member<&ReservationInfo::retained_bytes>, bytes},
    // Host bytes: none (null) while a reservation is awake, or asleep having discarded them.
    {"ON HOST", "host_bytes", member_or_null<&ReservationInfo::host_bytes>, bytes},
};

inline constexpr field<named_reservation_status> kReservationStatusFields[] = {
    {"reservation", "name", member<&named_reservation_status::name>},
    {"id", "id", member<&ReservationStatus::id>},
    {"state", "state", state_of<named_reservation_status>},
    {"version", "version", member<&ReservationStatus::version>},
    {"committed", "committed", member<&ReservationStatus::committed>, bytes},
    {"on host", "host_bytes", member_or_null<&ReservationStatus::host_bytes>, bytes},
    {"busy", "busy", member<&ReservationStatus::busy>,
     [](const json& busy, const named_reservation_status&) -> std::string {
       return busy.get<bool>() ? "yes (a sleep or wake is under way)" : "no";
     }},
    // The last sleep or wake that failed: null (JSON) or "-" when none did.
    {"last failure", "error",
     [](const named_reservation_status& status) -> json {
       if (status.error == gpumem::errc::ok) return nullptr;
       return gpumem::proto::describe(status.error);
     },
     [](const json& error, const named_reservation_status& status) -> std::string {
       return error.is_null() ? "-" : error.get<std::string>() + ": " + status.reason;
     }},
    {"", "reason", member_or_null<&ReservationStatus::reason>},
};

inline constexpr field<SyncInfo> kSyncFields[] = {
    {"ID", "id", member<&SyncInfo::id>},
    {"KIND", "kind", [](const SyncInfo& sync) -> json { return kind_name(sync.kind); }},
    {"NAME", "name", member<&SyncInfo::name>},
    {"DOMAIN", "domain", member<&SyncInfo::domain>},
    {"STATE", "state", [](const SyncInfo& sync) -> json { return sync_state(sync); }},
    {"", "held", member<&SyncInfo::held>},
    // Null while free, and while held by a client that is gone (`held` tells them apart).
    {"OWNER", "owner_client",
     [](const SyncInfo& sync) {
       return sync.held && sync.owner_client != 0 ? json(sync.owner_client) : json(nullptr);
     },
     [](const json& owner, const SyncInfo& sync) -> std::string {
       if (!sync.held) return "-";
       return owner.is_null() ? "(gone)" : "client " + owner.dump();
     }},
    {"OWNER PID", "owner_pid",
     [](const SyncInfo& sync) { return sync.held ? visible_pid(sync.owner_pid) : json(nullptr); },
     [](const json& pid, const SyncInfo& sync) -> std::string {
       // A lock held by a client that is gone has no process to name.
       return sync.held && sync.owner_client != 0 ? pid_or_note(pid) : "-";
     }},
    // A lock has waiters queued, a barrier or channel parties: null for the other kind.
    {"QUEUED", "queued",
     [](const SyncInfo& sync) {
       return sync.kind == gpumem::SyncKind::lock ? json(sync.queued) : json(nullptr);
     },
     dash_if_absent},
    {"PARTIES", "parties",
     [](const SyncInfo& sync) {
       return sync.kind == gpumem::SyncKind::lock ? json(nullptr) : json(sync.parties);
     },
     dash_if_absent},
    {"OPEN", "attached", member<&SyncInfo::attached>},
    {"DEATHS", "owner_deaths", member<&SyncInfo::owner_deaths>},
    {"", "epoch", member<&SyncInfo::epoch>},
};

}  // namespace gpumemctl
