#pragma once
/// @file
/// @brief The daemon's configuration: an embedded default, optionally replaced by a YAML file.
///
/// daemon/config/ holds the configuration: the structs the rest of the daemon reads (here),
/// the table of every key with its type, default, description and member (config_keys.hpp),
/// the reading and printing of YAML that the table drives (config.cpp), what a reload changes
/// (reload_plan.hpp) and --check-config's look at the CUDA devices (device_check.hpp). Every
/// other daemon folder may include it, so it includes only proto/ and shared/ headers (and
/// third-party ones), never a header of another daemon folder.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gpumem/proto/messages.hpp"

namespace gpumem::daemon {

/// One entry of `pools`. The values come from the file or from the defaults of kPoolKeys.
struct pool_config {
  std::string name;
  std::int32_t device = proto::kHostDevice;
  std::uint64_t size = 0;  ///< capacity of a host pool; maximum size of a CUDA pool
  /// Set as the CUDA pool's release threshold; the pool's size unless configured. No effect on
  /// the device memory of IPC pools (config_notices()).
  std::uint64_t release_threshold = 0;
  std::vector<std::int32_t> peer_access;

  friend bool operator==(const pool_config&, const pool_config&) = default;
};

/// Who may connect, the mode of objects whose creator gives none, and who operates. uids and
/// gids are resolved from names when the file is read.
struct access_config {
  /// Besides root, the daemon's own uid and members of the socket's group.
  std::vector<uid_t> connect_users;
  std::vector<gid_t> connect_groups;
  /// Members may list every object and client and reset any lock or barrier; root always may.
  std::optional<gid_t> admin_group;
  /// Permission bits (rw for owner, group, others) of an object whose creator gives none.
  mode_t default_mode = 0600;

  friend bool operator==(const access_config&, const access_config&) = default;
};

/// Limits of one quota entry; nullopt: no limit from this entry.
struct quota_limits {
  std::optional<std::uint64_t> bytes;        ///< per device kind: host memory and GPU memory apart
  std::optional<std::uint64_t> allocations;  ///< allocations and reservations owned
  std::optional<std::uint64_t> sync_objects;
  std::optional<std::uint64_t> connections;

  friend bool operator==(const quota_limits&, const quota_limits&) = default;
};

struct quota_config {
  quota_limits per_uid;                ///< `default`: every uid without an entry of its own
  quota_limits per_client;             ///< `client`: each connection
  std::map<uid_t, quota_limits> uids;  ///< `uid:N` / `user:NAME`; unset fields: per_uid's
  std::map<gid_t, quota_limits> gids;  ///< `group:NAME` / `gid:N`: what the group's uids own

  friend bool operator==(const quota_config&, const quota_config&) = default;
};

/// Descriptors of systemd's fd store held back for pool instances, lock and signal pages and the
/// state's own files (descriptor_budget), and the least that fd_store_max must leave
/// reservations beside them and a pidfd per connection.
inline constexpr std::uint64_t kFdStoreKeptForTheDaemon = 256;
inline constexpr std::uint64_t kFdStoreLeastForReservations = 256;

/// The whole configuration. Its defaults live in kDaemonKeys: start from
/// embedded_default_config() or load_config_file(), not from a default-constructed value.
struct daemon_config {
  std::string socket_path;  ///< empty: the default rules of socket_path.hpp
  mode_t socket_mode = 0;
  std::string log_level;
  access_config access;
  quota_config quotas;
  /// Unread replies, in the daemon and the client's full socket, before it is disconnected.
  std::uint64_t max_output_bytes = 0;
  std::vector<pool_config> pools;
  /// Connections open at once; the daemon closes more as soon as it accepts them.
  std::uint64_t max_connections = 0;
  /// How long a request may take to arrive once its first byte has.
  std::chrono::milliseconds frame_deadline{0};
  /// "HOST:PORT" of the HTTP endpoint for Prometheus; empty: none.
  std::string metrics_listen;
  /// Host memory woken reservations may keep for their next sleep (reservation_book).
  std::uint64_t sleep_memory_kept = 0;
  /// systemd's FileDescriptorStoreMax for the unit (descriptor_budget).
  std::uint64_t fd_store_max = 0;

  friend bool operator==(const daemon_config&, const daemon_config&) = default;
};

struct config_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// @brief Every key at its default: one host pool named "host" of 1 GiB; CUDA pools are added
/// per visible device (default_cuda_pool).
daemon_config embedded_default_config();

/// @brief Reads a YAML file; a key it leaves out takes its default.
/// Unknown keys, bad values and duplicate pool names are errors.
/// @throws config_error naming the file, the key and the problem.
daemon_config load_config_file(const std::string& path);

/// @brief The pool made for a visible CUDA device when the configuration lists no CUDA pool:
/// named "cudaN", as large as the device, every other key at its default (so it keeps all
/// freed memory for reuse), as if the file listed it.
pool_config default_cuda_pool(std::int32_t device, std::uint64_t device_bytes);

/// @brief What a valid configuration asks for that gpumemd cannot give, one line per key, for
/// the log at start and reload and for --check-config: a pool's release_threshold below its
/// size (IPC pools keep the memory of exported blocks whatever it says).
std::vector<std::string> config_notices(const daemon_config& config);

/// @brief The embedded default as a commented YAML document: each key's description and
/// default, then a commented example of a pool with every pool key. `gpumemd
/// --print-default-config` prints it; deploy/gpumemd.example.yaml is a copy.
std::string default_config_yaml();

/// @brief Sets one top-level key from a command-line option's text, read and checked as the
/// file's value would be. @throws config_error naming @p source (the option) and the problem.
void set_key(daemon_config& config, std::string_view key, const std::string& value,
             std::string_view source);

/// @brief Parses "4096", "64KiB", "1.5GiB", "2MB" into bytes.
/// @throws config_error on anything else.
std::uint64_t parse_size(const std::string& text);

}  // namespace gpumem::daemon
