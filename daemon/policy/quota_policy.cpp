#include "policy/quota_policy.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "policy/access_policy.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

namespace {

/// One field of a usage and its quota key, for the checks and the messages.
struct measure {
  const char* key;   ///< the quota entry's key
  const char* what;  ///< words for the message
  std::uint64_t usage::*used;
  std::uint64_t charge::*asked;
  std::optional<std::uint64_t> quota_limits::*limit;
  bool bytes;
};

constexpr measure kMeasures[] = {
    {"bytes", "bytes of host memory", &usage::host_bytes, &charge::host_bytes, &quota_limits::bytes,
     true},
    {"bytes", "bytes of GPU memory", &usage::device_bytes, &charge::device_bytes,
     &quota_limits::bytes, true},
    {"allocations", "allocations and reservations", &usage::memory_objects, &charge::memory_objects,
     &quota_limits::allocations, false},
    {"sync_objects", "locks, barriers and channels", &usage::sync_objects, &charge::sync_objects,
     &quota_limits::sync_objects, false},
    {"connections", "connections", &usage::connections, &charge::connections,
     &quota_limits::connections, false},
};

std::string amount(std::uint64_t value, bool bytes) {
  if (!bytes || value < (1u << 20)) return std::to_string(value);
  return fmt::format("{} ({:.1f} MiB)", value, static_cast<double>(value) / (1 << 20));
}

/// Whose quota a check is against: the configuration entry and the account, named only when a
/// request is refused, so that a request within its quotas builds no text.
struct quota_scope {
  const char* entry;  ///< the configuration entry, "quotas.uid" with its number when numbered
  bool numbered_entry;
  const char* whose;  ///< "uid", "group", "client"
  std::uint64_t number;

  std::string entry_text() const {
    return numbered_entry ? fmt::format("{}:{}", entry, number) : std::string(entry);
  }
};

void check_entry(const quota_limits& limits, const usage& used, const charge& wanted,
                 const quota_scope& scope, const credentials& who) {
  for (const measure& m : kMeasures) {
    const auto limit = limits.*m.limit;
    const std::uint64_t asked = wanted.*m.asked;
    if (!limit || asked == 0) continue;
    const std::uint64_t in_use = used.*m.used;
    if (in_use <= *limit && asked <= *limit - in_use) continue;
    throw request_error(
        proto::errc::quota_exceeded,
        fmt::format("quota {}.{} of {} {}: {} {} in use + {} asked > limit {} (client {})",
                    scope.entry_text(), m.key, scope.whose, scope.number, amount(in_use, m.bytes),
                    m.what, amount(asked, m.bytes), amount(*limit, m.bytes),
                    access_policy::describe(who)));
  }
}

/// The scope of a uid's quota: its own entry, or the default.
quota_scope uid_scope(const quota_config& config, uid_t uid) {
  return config.uids.contains(uid) ? quota_scope{"quotas.uid", true, "uid", uid}
                                   : quota_scope{"quotas.default", false, "uid", uid};
}

quota_scope gid_scope(gid_t gid) {
  return {"quotas.gid", true, "group", gid};
}

quota_limits over(const quota_limits& entry, const quota_limits& base) {
  return {entry.bytes ? entry.bytes : base.bytes,
          entry.allocations ? entry.allocations : base.allocations,
          entry.sync_objects ? entry.sync_objects : base.sync_objects,
          entry.connections ? entry.connections : base.connections};
}

}  // namespace

charge charge::memory(std::int32_t device, std::uint64_t bytes, std::uint64_t objects) {
  charge made;
  (device == proto::kHostDevice ? made.host_bytes : made.device_bytes) = bytes;
  made.memory_objects = objects;
  return made;
}

quota_limits quota_policy::limits_of_uid(uid_t uid) const {
  const auto entry = config_.uids.find(uid);
  return entry == config_.uids.end() ? config_.per_uid : over(entry->second, config_.per_uid);
}

void quota_policy::check_connection(const ledger& rows, client_id client) const {
  check_connection_of(rows, rows.client(client).who, connection_stage::said_hello);
}

void quota_policy::check_new_connection(const ledger& rows, const credentials& who) const {
  check_connection_of(rows, who, connection_stage::accepted);
}

void quota_policy::check_connection_of(const ledger& rows, const credentials& who,
                                       connection_stage stage) const {
  // Checked as if the connection were asked for now: usage without it, plus one.
  const auto without_it = [stage](usage used) {
    // A hello's own connection is in the ledger. An accepted one may be a process coming back
    // to a session that awaits its resume (after a restart, each of a uid at its quota is),
    // while others of its uid are already in: each such session is left out and keeps one
    // more place for its return, and the hello counts again.
    const std::uint64_t left_out =
        stage == connection_stage::said_hello ? 1 : 2 * used.awaiting_resume;
    used.connections -= std::min(used.connections, left_out);
    return used;
  };
  charge one;
  one.connections = 1;
  check_entry(limits_of_uid(who.uid), without_it(rows.usage_of_uid(who.uid)), one,
              uid_scope(config_, who.uid), who);
  if (const auto group = config_.gids.find(who.gid); group != config_.gids.end()) {
    check_entry(group->second, without_it(rows.usage_of_gid(who.gid)), one, gid_scope(who.gid),
                who);
  }
}

void quota_policy::check(const ledger& rows, client_id client, const charge& wanted) const {
  const client_row& row = rows.client(client);
  const credentials& who = row.who;
  check_entry(limits_of_uid(who.uid), rows.usage_of_uid(who.uid), wanted,
              uid_scope(config_, who.uid), who);
  if (const auto group = config_.gids.find(who.gid); group != config_.gids.end()) {
    check_entry(group->second, rows.usage_of_gid(who.gid), wanted, gid_scope(who.gid), who);
  }
  check_entry(config_.per_client, row.owns, wanted, {"quotas.client", false, "client", client},
              who);
}

}  // namespace gpumem::daemon
