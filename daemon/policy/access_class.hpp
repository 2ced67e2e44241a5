#pragma once
/// @file
/// @brief An access class: objects that the same clients may read and write. Whoever is given
/// a descriptor shared by several objects (a pool instance, a lock page) can reach all of them,
/// so the daemon shares descriptors only within a class. Part of daemon/policy/.

#include <sys/types.h>

#include <compare>
#include <optional>
#include <string>

#include "ledger/ledger.hpp"

namespace gpumem::daemon {

struct access_class {
  uid_t owner;
  /// Set when the mode shares anything: like a file, a member of the group gets the group's
  /// bits, not the others', so the group matters to others too.
  std::optional<gid_t> group;
  mode_t shared_bits;  ///< the group's and others' bits that decide

  auto operator<=>(const access_class&) const = default;

  /// @brief Memory: readers and writers differ, so every rw bit counts.
  static access_class for_memory(uid_t owner, gid_t group, mode_t mode) noexcept;
  /// @brief Locks, barriers, channels are only used read-write: r or w alone gives nothing.
  static access_class for_sync(uid_t owner, gid_t group, mode_t mode) noexcept;
  /// @brief A row that gives each client what every object of the class gives it, to ask
  /// access_policy about.
  object_row sample() const;
  /// "uid 1000, mode 0600" or "uid 1000, group 100, mode 0660" for messages.
  std::string describe() const;
};

}  // namespace gpumem::daemon
