#pragma once
/// @file
/// @brief Every configuration key, written once: its YAML name, type, default, description and
/// the member it sets. Reading a file (with its unknown-key errors), the embedded default,
/// --check-config and --print-default-config (deploy/gpumemd.example.yaml) all read these
/// two tables; adding a key is adding a row.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.hpp"
#include "gpumem/proto/wire.hpp"

namespace gpumem::daemon {

/// How a key's YAML value is read, and the C++ type it is read as.
enum class value_type {
  text,          ///< std::string: any single value
  log_level,     ///< std::string: trace, debug, info, warn, error, critical or off
  pool_name,     ///< std::string: 1 to 63 characters of [A-Za-z0-9._:/@+-]
  octal_mode,    ///< mode_t: permissions in octal, quoted ("0660")
  boolean,       ///< bool: true or false
  size,          ///< std::uint64_t: bytes, or a number and a unit (64KiB, 1.5GiB, 2MB)
  nonzero_size,  ///< std::uint64_t: a size above 0
  device,        ///< std::int32_t: host (proto::kHostDevice) or a CUDA device number
  cuda_devices,  ///< std::vector<std::int32_t>: a list of CUDA device numbers
  pools,         ///< std::vector<pool_config>: a list of maps with the keys of kPoolKeys
  users,         ///< std::vector<uid_t>: a list of user names or uids
  groups,        ///< std::vector<gid_t>: a list of group names or gids
  group,         ///< std::optional<gid_t>: a group name or gid; "" for none
  size_limit,    ///< std::optional<std::uint64_t>: a size, or unlimited
  count_limit,   ///< std::optional<std::uint64_t>: a count, or unlimited
  access,        ///< access_config: a map with the keys of kAccessKeys
  quotas,        ///< quota_config: entries (default, client, uid:N, user:NAME, group:NAME,
                 ///< gid:N), each a map with the keys of kQuotaKeys
  count,         ///< std::uint64_t: a whole number above 0
  duration,      ///< std::chrono::milliseconds: a number and a unit (250ms, 10s, 2min), above 0
};

/// Where a key's value lands in Config: a member, or a setter where one key sets two members.
/// config.cpp checks at compile time that each row's landing takes what its type reads.
template <class Config>
using config_landing =
    std::variant<std::string Config::*, mode_t Config::*, bool Config::*, std::uint64_t Config::*,
                 std::int32_t Config::*, std::vector<std::int32_t> Config::*,
                 std::vector<pool_config> Config::*, std::vector<uid_t> Config::*,
                 std::optional<gid_t> Config::*, std::optional<std::uint64_t> Config::*,
                 access_config Config::*, quota_config Config::*,
                 std::chrono::milliseconds Config::*, void (*)(Config&, std::uint64_t),
                 void (*)(Config&, bool), void (*)(Config&, std::string)>;

/// @brief Sets metrics_listen once @p address is "" or "HOST:PORT" and this gpumemd can serve
/// HTTP (it was built with prometheus-cpp). @throws config_error naming the key otherwise.
void set_metrics_listen(daemon_config& config, std::string address);

template <class Config>
struct config_key {
  std::string_view key;
  value_type type;
  /// YAML text of the value a key left out takes; empty: it takes none.
  std::string_view default_value = {};
  bool required = false;  ///< leaving the key out is an error
  std::string_view description;
  std::string_view example = {};  ///< the value shown in the commented example pool
  config_landing<Config> lands_in;
  /// Sizes, counts and durations (in ms) below it are refused: they would leave the daemon
  /// unable to serve. @ref minimum_reason says why, in the error.
  std::uint64_t minimum = 0;
  std::string_view minimum_reason = {};
};

/// The largest reply frame: a header and the largest payload.
inline constexpr std::uint64_t kLargestFrame = sizeof(proto::header) + proto::kMaxPayloadSize;
/// A client may leave 64 KiB of replies unread before its requests are held
/// (session::kBackpressureBytes), and the reply that crosses that line may be the largest:
/// max_output_bytes below their sum disconnects clients that did nothing wrong.
inline constexpr std::uint64_t kMinOutputBytes = 256 * 1024;
static_assert(kMinOutputBytes >= 64 * 1024 + kLargestFrame);

/// The keys of an entry of `pools`, read in this order: size sets the release threshold too,
/// and release_threshold, read after it, overrides that.
inline constexpr config_key<pool_config> kPoolKeys[] = {
    {.key = "name",
     .type = value_type::pool_name,
     .required = true,
     .description = "1 to 63 characters of [A-Za-z0-9._:/@+-]",
     .example = "gpu0",
     .lands_in = &pool_config::name},
    {.key = "device",
     .type = value_type::device,
     .required = true,
     .description = "host (a sealed memfd) or a CUDA device number",
     .example = "0",
     .lands_in = &pool_config::device},
    {.key = "size",
     .type = value_type::nonzero_size,
     .required = true,
     .description = "Capacity of a host pool, maximum size of a CUDA pool",
     .example = "60GiB",
     .lands_in =
         +[](pool_config& pool, std::uint64_t bytes) {
           pool.size = bytes;
           pool.release_threshold = bytes;
         },
     .minimum = 4096,
     .minimum_reason = "a page, the least a pool maps"},
    {.key = "release_threshold",
     .type = value_type::size,
     .description = "No effect (IPC pools keep exported blocks' memory); default: its size",
     .example = "8GiB",
     .lands_in = &pool_config::release_threshold},
    {.key = "peer_access",
     .type = value_type::cuda_devices,
     .default_value = "[]",
     .description = "Devices whose kernels may use the pool's memory",
     .example = "[1]",
     .lands_in = &pool_config::peer_access},
};

/// The keys of `access`.
inline constexpr config_key<access_config> kAccessKeys[] = {
    {.key = "connect_users",
     .type = value_type::users,
     .default_value = "[]",
     .description = "Users who may connect besides root, the daemon's user and the socket's group",
     .lands_in = &access_config::connect_users},
    {.key = "connect_groups",
     .type = value_type::groups,
     .default_value = "[]",
     .description = "Groups whose members may connect",
     .lands_in = &access_config::connect_groups},
    {.key = "admin_group",
     .type = value_type::group,
     .default_value = R"("")",
     .description = "Members list everything and reset any object (gpumemctl); root always may",
     .lands_in = &access_config::admin_group},
    {.key = "default_mode",
     .type = value_type::octal_mode,
     .default_value = R"("0600")",
     .description = "rw bits for owner, group, others of an object whose creator gives none",
     .lands_in = &access_config::default_mode},
};

/// The keys of one entry of `quotas`; a key left out sets no limit (uid entries: the default's).
inline constexpr config_key<quota_limits> kQuotaKeys[] = {
    {.key = "bytes",
     .type = value_type::size_limit,
     .description = "Memory owned, per device kind (host, GPU), allocations and reservations",
     .lands_in = &quota_limits::bytes},
    {.key = "allocations",
     .type = value_type::count_limit,
     .description = "Allocations and reservations owned",
     .lands_in = &quota_limits::allocations},
    {.key = "sync_objects",
     .type = value_type::count_limit,
     .description = "Locks, barriers and channels made",
     .lands_in = &quota_limits::sync_objects},
    {.key = "connections",
     .type = value_type::count_limit,
     .description = "Connections at once",
     .lands_in = &quota_limits::connections},
};

/// The top-level keys, printed in this order by --print-default-config.
inline constexpr config_key<daemon_config> kDaemonKeys[] = {
    {.key = "socket",
     .type = value_type::text,
     .default_value = R"("")",
     .description = "Where clients connect; \"\": $GPUMEM_SOCKET, else /run/gpumemd/gpumemd.sock "
                    "for root, else per user",
     .lands_in = &daemon_config::socket_path},
    {.key = "socket_mode",
     .type = value_type::octal_mode,
     .default_value = R"("0600")",
     .description = R"(Octal permissions of the socket; "0660" lets the service's group connect)",
     .lands_in = &daemon_config::socket_mode},
    {.key = "log_level",
     .type = value_type::log_level,
     .default_value = "info",
     .description = "trace, debug, info, warn, error, critical or off; --log-level overrides it",
     .lands_in = &daemon_config::log_level},
    {.key = "access",
     .type = value_type::access,
     .default_value = "connect_users: []\nconnect_groups: []\nadmin_group: \"\"\n"
                      "default_mode: \"0600\"",
     .description = "Who may connect, the default mode of named objects, who operates",
     .lands_in = &daemon_config::access},
    {.key = "open_across_users",
     .type = value_type::boolean,
     .default_value = "false",
     .description = "Older spelling: true makes access.default_mode \"0666\" (read after access)",
     .lands_in =
         +[](daemon_config& config, bool across) {
           if (across) config.access.default_mode = 0666;
         }},
    {.key = "quotas",
     .type = value_type::quotas,
     .default_value = "default:\n  allocations: 100000\n  sync_objects: 256\n  connections: 1024",
     .description = "Limits per uid (default, uid:N, user:NAME), per primary group of the owners "
                    "(group:NAME, gid:N) and per connection (client); a limit left out is none",
     .lands_in = &daemon_config::quotas},
    {.key = "max_output_bytes",
     .type = value_type::size,
     .default_value = "4MiB",
     .description = "Unread replies (in the daemon and the client's full socket) before a "
                    "client is disconnected",
     .lands_in = &daemon_config::max_output_bytes,
     .minimum = kMinOutputBytes,
     .minimum_reason = "replies a client may leave unread plus the largest reply; less "
                       "disconnects clients that did nothing wrong"},
    {.key = "pools",
     .type = value_type::pools,
     .default_value = "- name: host\n  device: host\n  size: 1GiB",
     .description = "The pools. With no CUDA pool listed, gpumemd adds one per visible device: "
                    "cuda0, cuda1, ...",
     .lands_in = &daemon_config::pools},
    {.key = "max_connections",
     .type = value_type::count,
     .default_value = "4096",
     .description = "Connections open at once, all clients together; more are closed at once",
     .lands_in = &daemon_config::max_connections},
    {.key = "frame_deadline",
     .type = value_type::duration,
     .default_value = "10s",
     .description = "A request still arriving this long after its first byte closes its "
                    "connection; idle ones stay open",
     .lands_in = &daemon_config::frame_deadline,
     .minimum = 100,
     .minimum_reason = "a busy client needs that long to send a 64 KiB request"},
    {.key = "metrics_listen",
     .type = value_type::text,
     .default_value = R"("")",
     .description = "HOST:PORT where Prometheus scrapes /metrics over HTTP (127.0.0.1:9464); "
                    "\"\": none. Needs a gpumemd built with prometheus-cpp",
     .lands_in = &set_metrics_listen},
    {.key = "sleep_memory_kept",
     .type = value_type::size,
     .default_value = "0",
     .description = "Host memory a woken reservation may keep, made and pinned, so that its next "
                    "sleep copies at once (all reservations together; 0: none is kept)",
     .lands_in = &daemon_config::sleep_memory_kept},
    {.key = "fd_store_max",
     .type = value_type::count,
     .default_value = "16384",
     .description = "FileDescriptorStoreMax of gpumemd's unit: keep the two equal, at least "
                    "max_connections + 512. What would pass it (reservation chunks, pool "
                    "instances, lock pages), less a pidfd per connection and the daemon's own, "
                    "is refused, since what systemd's fd store drops is lost at a restart",
     .lands_in = &daemon_config::fd_store_max},
};

}  // namespace gpumem::daemon
