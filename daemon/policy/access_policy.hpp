#pragma once
/// @file
/// @brief daemon/policy/: who may do what, decided in one place.
///
/// access_policy answers the permission questions (may this client connect, open, see or reset
/// that object); quota_policy answers the quota ones. Both read the configuration and the
/// ledger's rows and decide; neither keeps state of its own, so a decision is the same whichever
/// book asks. Every refusal names the object, the client and the rule that refused it.
/// May include: proto/ and shared/ headers, daemon/config/, daemon/ledger/,
/// daemon/request_error.hpp. Nothing else of the daemon.
///
/// The rules, as for files: a named object has an owner uid, an owner gid (its maker's primary
/// group) and rw mode bits for owner, group and others. Opening read-only needs an r bit that
/// applies to the opener, opening read-write (and any use of a lock, barrier or channel) needs
/// r and w. root and members of access.admin_group (administrators) may do everything; the
/// daemon's own uid is an administrator too.

#include <sys/types.h>

#include <optional>
#include <string>

#include "config/config.hpp"
#include "gpumem/proto/messages.hpp"
#include "ledger/ledger.hpp"

namespace gpumem::daemon {

enum class wanted_access { read, read_write };
/// Whose object an open may join: any whose mode lets the opener in, or only one its own uid
/// made (proto::kFlagOwnOnly).
enum class whose_object { any_allowed, own_only };
constexpr whose_object whose_from(std::uint32_t open_flags) noexcept {
  return (open_flags & proto::kFlagOwnOnly) != 0 ? whose_object::own_only
                                                 : whose_object::any_allowed;
}

class access_policy {
 public:
  /// @param socket_group the group of the socket file: its members may connect.
  access_policy(access_config config, uid_t daemon_uid, std::optional<gid_t> socket_group);

  /// @throws request_error(permission_denied) naming the client and the rule.
  void check_connect(const credentials& who) const;
  bool is_admin(const credentials& who) const noexcept;

  /// @brief The mode a new object gets from its creation flags (proto::kFlagModeGiven).
  mode_t mode_for(std::uint32_t creation_flags) const noexcept;

  /// @throws request_error(permission_denied) naming the object (describe_to()), the client
  /// and the rule: its mode, or, for whose_object::own_only, that another uid made it.
  void check_open(const credentials& who, object_id id, const object_row& row, wanted_access wanted,
                  whose_object whose) const;
  bool may_open(const credentials& who, const object_row& row, wanted_access wanted) const noexcept;
  /// @brief Lists show an object to its owner uid, to whoever may open it, and to
  /// administrators.
  bool may_see(const credentials& who, const object_row& row) const noexcept;
  /// @brief Lists show a client to clients of its uid and to administrators.
  bool may_see_client(const credentials& who, const credentials& other) const noexcept;
  /// @brief An operator's act on an object (a reset, a sleep): the owner uid or an
  /// administrator. @p action completes "may not ..." in the refusal ("reset", "wake").
  /// @throws request_error(permission_denied)
  void check_operate(const credentials& who, object_id id, const object_row& row,
                     std::string_view action) const;

  /// @brief The object as a refusal to @p who names it: describe_object() where @p who may see
  /// it; else only its kind, name and id ("lock 'jobs' (id 7)"), as the lists leave it out.
  std::string describe_to(const credentials& who, object_id id, const object_row& row) const;
  /// @brief What describe_to() leaves out for @p who, for the daemon's log alone
  /// (request_error::logged_only): describe_object(), or empty where @p who may see it all.
  std::string withheld_from(const credentials& who, object_id id, const object_row& row) const;

  /// "pid 42 uid 1001 (label)" for log lines and refusals.
  static std::string describe(const credentials& who, const std::string& label = {});

 private:
  /// The rw bits (r = 2, w = 1) of @p row's mode that apply to @p who.
  unsigned bits_for(const credentials& who, const object_row& row) const noexcept;

  access_config config_;
  uid_t daemon_uid_;
  std::optional<gid_t> socket_group_;
};

/// "lock 'jobs' (id 7, owner uid 1001, mode 0600)" for messages.
std::string describe_object(object_id id, const object_row& row);
/// "lock 'jobs' (id 7)", or "lock (id 7)" for an anonymous one: the object without its owner.
std::string name_object(object_id id, const object_row& row);

}  // namespace gpumem::daemon
