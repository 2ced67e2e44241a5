#include "policy/access_policy.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;

namespace {
constexpr unsigned kRead = 2;
constexpr unsigned kWrite = 1;
}  // namespace

namespace {
/// "'jobs' " for a named object, "" for an anonymous one.
std::string quoted_name(const object_row& row) {
  return row.name.empty() ? "" : fmt::format("'{}' ", row.name);
}
}  // namespace

std::string describe_object(object_id id, const object_row& row) {
  return fmt::format("{} {}(id {}, owner uid {}, group {}, mode {:04o})", kind_name(row.kind),
                     quoted_name(row), id, row.owner_uid, row.owner_gid, row.mode);
}

std::string name_object(object_id id, const object_row& row) {
  return fmt::format("{} {}(id {})", kind_name(row.kind), quoted_name(row), id);
}

std::string access_policy::describe_to(const credentials& who, object_id id,
                                       const object_row& row) const {
  // The lists leave it out for this client: its owner and mode are not this client's to learn.
  return may_see(who, row) ? describe_object(id, row) : name_object(id, row);
}

std::string access_policy::withheld_from(const credentials& who, object_id id,
                                         const object_row& row) const {
  return may_see(who, row) ? std::string() : describe_object(id, row);
}

access_policy::access_policy(access_config config, uid_t daemon_uid,
                             std::optional<gid_t> socket_group)
    : config_(std::move(config)), daemon_uid_(daemon_uid), socket_group_(socket_group) {}

std::string access_policy::describe(const credentials& who, const std::string& label) {
  return label.empty() ? fmt::format("pid {} uid {}", who.pid, who.uid)
                       : fmt::format("pid {} uid {} ({})", who.pid, who.uid, label);
}

void access_policy::check_connect(const credentials& who) const {
  if (who.uid == 0 || who.uid == daemon_uid_ || is_admin(who)) return;
  if (socket_group_ && who.in_group(*socket_group_)) return;
  if (std::ranges::find(config_.connect_users, who.uid) != config_.connect_users.end()) return;
  if (std::ranges::any_of(config_.connect_groups, [&](gid_t g) { return who.in_group(g); })) {
    return;
  }
  throw request_error(errc::permission_denied,
                      fmt::format("{} may not connect: it is neither root, the daemon's user, in "
                                  "the socket's group, nor listed in access.connect_users or "
                                  "access.connect_groups",
                                  describe(who)));
}

bool access_policy::is_admin(const credentials& who) const noexcept {
  return who.uid == 0 || who.uid == daemon_uid_ ||
         (config_.admin_group && who.in_group(*config_.admin_group));
}

mode_t access_policy::mode_for(std::uint32_t creation_flags) const noexcept {
  if ((creation_flags & proto::kFlagModeGiven) == 0) return config_.default_mode;
  return static_cast<mode_t>(creation_flags & proto::kFlagModeBits);
}

unsigned access_policy::bits_for(const credentials& who, const object_row& row) const noexcept {
  // Like a file: the first class the client falls in decides, even if a later one gives more.
  const auto rw = [](mode_t bits) { return static_cast<unsigned>(bits >> 1) & 3u; };
  if (who.uid == row.owner_uid) return rw(row.mode >> 6) | kRead | kWrite;
  if (who.in_group(row.owner_gid)) return rw(row.mode >> 3);
  return rw(row.mode);
}

bool access_policy::may_open(const credentials& who, const object_row& row,
                             wanted_access wanted) const noexcept {
  const unsigned needed = wanted == wanted_access::read ? kRead : kRead | kWrite;
  return is_admin(who) || (bits_for(who, row) & needed) == needed;
}

void access_policy::check_open(const credentials& who, object_id id, const object_row& row,
                               wanted_access wanted, whose_object whose) const {
  if (whose == whose_object::own_only && row.owner_uid != who.uid) {
    throw request_error(
        errc::permission_denied,
        fmt::format("{} opens only objects of its own uid (open_own_objects_only), and {} was "
                    "made by another user: not joined (was its name taken "
                    "first?)",
                    describe(who), describe_to(who, id, row)),
        withheld_from(who, id, row));
  }
  if (may_open(who, row, wanted)) return;
  // Naming the class (group or other) would tell a client that may not even read the object
  // whether it is in its owner's group.
  const std::string users = !may_see(who, row)            ? std::string("this client")
                            : who.in_group(row.owner_gid) ? std::string("group users")
                                                          : std::string("other users");
  throw request_error(
      errc::permission_denied,
      fmt::format("{} may not open {} {}: its mode gives {} no {} access", describe(who),
                  describe_to(who, id, row), wanted == wanted_access::read ? "to read" : "to write",
                  users, wanted == wanted_access::read ? "read" : "read-write"),
      withheld_from(who, id, row));
}

bool access_policy::may_see(const credentials& who, const object_row& row) const noexcept {
  return is_admin(who) || (bits_for(who, row) & kRead) != 0;
}

bool access_policy::may_see_client(const credentials& who,
                                   const credentials& other) const noexcept {
  return is_admin(who) || who.uid == other.uid;
}

void access_policy::check_operate(const credentials& who, object_id id, const object_row& row,
                                  std::string_view action) const {
  if (is_admin(who) || who.uid == row.owner_uid) return;
  throw request_error(errc::permission_denied,
                      fmt::format("{} may not {} {}: only its owner uid and administrators "
                                  "(root, access.admin_group) may",
                                  describe(who), action, describe_to(who, id, row)),
                      withheld_from(who, id, row));
}

}  // namespace gpumem::daemon
