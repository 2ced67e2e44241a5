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
  check_connection_of(rows, rows.client(client).who, {.of_uid = 1, .of_gid = 1});
}

void quota_policy::check_new_connection(const ledger& rows, const credentials& who) const {
  try {
    check_connection_of(rows, who, {});
  } catch (const request_error&) {
    // Sessions awaiting their processes' resumes count as connections, and this one may be
    // such a process coming back (after a restart, each of a uid at its quota is), while
    // others of its uid are already in: each such session is left out and has one more place
    // kept for its return; the hello counts again. Looked for only on the way to a refusal, as
    // it takes a look at every client.
    const ledger::unserved_sessions awaiting = rows.unserved_of(who);
    check_connection_of(rows, who, {2 * awaiting.of_uid, 2 * awaiting.of_gid});
  }
}

void quota_policy::check_connection_of(const ledger& rows, const credentials& who,
                                       ledger::unserved_sessions left_out) const {
  // Checked as if the connection were asked for now: usage without it, plus one.
  charge one;
  one.connections = 1;
  usage by_uid = rows.usage_of_uid(who.uid);
  by_uid.connections -= std::min(by_uid.connections, left_out.of_uid);
  check_entry(limits_of_uid(who.uid), by_uid, one, uid_scope(config_, who.uid), who);
  if (const auto group = config_.gids.find(who.gid); group != config_.gids.end()) {
    usage by_gid = rows.usage_of_gid(who.gid);
    by_gid.connections -= std::min(by_gid.connections, left_out.of_gid);
    check_entry(group->second, by_gid, one, gid_scope(who.gid), who);
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
