#pragma once
/// @file
/// @brief `gpumemctl top`: pools and clients with how fast their allocations and bytes change,
/// from two looks at the daemon in a row.

#include <chrono>
#include <optional>
#include <vector>

#include "field.hpp"
#include "gpumem/gpumem.hpp"
#include "records.hpp"

namespace gpumemctl {

/// @brief One look at the daemon; rates are the changes between two of them.
struct snapshot {
  gpumem::Stats stats;
  std::vector<gpumem::ClientInfo> clients;
  std::chrono::steady_clock::time_point taken;
};

/// @brief Change per second of live allocations and of bytes in use; nullopt on the first
/// look, or for a pool or client the previous look did not have.
struct rates {
  std::optional<double> allocations_per_s;
  std::optional<double> bytes_per_s;
};

struct pool_activity : gpumem::PoolStats {
  rates change;
};

struct client_activity : gpumem::ClientInfo {
  rates change;
};

/// @brief Each pool of @p now, with its rates since @p before (none without it).
std::vector<pool_activity> pool_activities(const snapshot& now, const snapshot* before);
/// @brief Each client of @p now, with the rates of what it owns since @p before.
std::vector<client_activity> client_activities(const snapshot& now, const snapshot* before);

/// @brief "+1.5", "-0.5", "0": allocations per second.
std::string count_rate_text(double per_second);
/// @brief "+1.0 MiB/s", "-512 B/s", "0 B/s".
std::string bytes_rate_text(double per_second);

template <auto rate, class Record>
json rate_of(const Record& record) {
  const auto& value = record.change.*rate;
  return value ? json(*value) : json(nullptr);
}

template <class Record>
std::string count_rate(const json& value, const Record& /*record*/) {
  return value.is_null() ? "-" : count_rate_text(value.get<double>());
}

template <class Record>
std::string bytes_rate(const json& value, const Record& /*record*/) {
  return value.is_null() ? "-" : bytes_rate_text(value.get<double>());
}

inline constexpr field<pool_activity> kPoolActivityFields[] = {
    {"POOL", "name", member<&gpumem::PoolStats::name>},
    {"DEVICE", "device", device_of<&gpumem::PoolStats::device>},
    {"IN USE", "bytes_in_use", member<&gpumem::PoolStats::bytes_in_use>, bytes},
    {"LIMIT", "size_limit", member<&gpumem::PoolStats::size_limit>, bytes},
    {"ALLOCATIONS", "allocations", member<&gpumem::PoolStats::allocations>},
    {"ALLOC/S", "allocations_per_s", rate_of<&rates::allocations_per_s, pool_activity>, count_rate},
    {"BYTES/S", "bytes_in_use_per_s", rate_of<&rates::bytes_per_s, pool_activity>, bytes_rate},
};

inline constexpr field<client_activity> kClientActivityFields[] = {
    {"ID", "id", member<&gpumem::ClientInfo::id>},
    {"PID", "pid", member<&gpumem::ClientInfo::pid>},
    {"UID", "uid", member<&gpumem::ClientInfo::uid>},
    {"LABEL", "label", member<&gpumem::ClientInfo::label>},
    {"OWNED", "allocations_owned", member<&gpumem::ClientInfo::allocations_owned>},
    {"BYTES OWNED", "bytes_owned", member<&gpumem::ClientInfo::bytes_owned>, bytes},
    {"ALLOC/S", "allocations_per_s", rate_of<&rates::allocations_per_s, client_activity>,
     count_rate},
    {"BYTES/S", "bytes_owned_per_s", rate_of<&rates::bytes_per_s, client_activity>, bytes_rate},
};

/// @brief What `top` prints at each refresh; it keeps the previous look for the rates.
class top_view {
 public:
  /// @brief A summary line, then the pools and the clients, each with their rates since the
  /// previous call (as JSON: one document with "pools" and "clients").
  void print(gpumem::Client& client, bool as_json);

 private:
  std::optional<snapshot> previous_;
};

}  // namespace gpumemctl
