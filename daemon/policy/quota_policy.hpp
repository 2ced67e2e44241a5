#pragma once
/// @file
/// @brief Quotas: what one uid, one primary group, one connection may own at once.
///
/// A request that would make something new (an allocation, a reservation or its growth, a
/// lock, a barrier, a channel, a connection) is checked against every quota that applies to
/// its client: its uid's entry (uid:N, else default; fields an entry leaves out take the
/// default's), the entry of its primary group (group:NAME) and the per-connection one (client).
/// Usage comes from the ledger, which counts what each owner uid and gid owns however many
/// clients hold it. Part of daemon/policy/ (see access_policy.hpp).

#include <cstdint>

#include "config/config.hpp"
#include "ledger/ledger.hpp"

namespace gpumem::daemon {

/// What a request would add to its client's usage.
struct charge {
  std::uint64_t host_bytes = 0;
  std::uint64_t device_bytes = 0;
  std::uint64_t memory_objects = 0;
  std::uint64_t sync_objects = 0;
  std::uint64_t connections = 0;

  static charge memory(std::int32_t device, std::uint64_t bytes, std::uint64_t objects = 1);
};

class quota_policy {
 public:
  explicit quota_policy(quota_config config) : config_(std::move(config)) {}

  /// @throws request_error(quota_exceeded) naming the quota (its configuration key), the use,
  /// the request and the limit.
  void check(const ledger& rows, client_id client, const charge& wanted) const;
  /// @brief A new connection, already counted in the ledger, fits its uid's and group's
  /// connection quotas. @throws request_error(quota_exceeded)
  void check_connection(const ledger& rows, client_id client) const;
  /// @brief The same for a connection of @p who not yet in the ledger (one just accepted).
  void check_new_connection(const ledger& rows, const credentials& who) const;

  /// @brief The limits for one uid: its entry over the default.
  quota_limits limits_of_uid(uid_t uid) const;
  const quota_config& config() const noexcept { return config_; }

 private:
  /// Where the connection asked for is: just accepted (not in the ledger), or at its hello (in
  /// the ledger already).
  enum class connection_stage { accepted, said_hello };
  void check_connection_of(const ledger& rows, const credentials& who,
                           connection_stage stage) const;

  quota_config config_;
};

}  // namespace gpumem::daemon
