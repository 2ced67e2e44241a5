#pragma once
/// @file
/// @brief The daemon's configuration: an embedded default, optionally replaced by a YAML file.

#include <sys/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpumem/proto/messages.hpp"

namespace gpumem::daemon {

struct pool_config {
  std::string name;
  std::int32_t device = proto::kHostDevice;
  std::uint64_t size = 0;  ///< capacity of a host pool; maximum size of a CUDA pool
  /// Bytes a CUDA pool keeps for reuse after frees; the pool's size unless configured.
  std::uint64_t release_threshold = 0;
  std::vector<std::int32_t> peer_access;
};

struct daemon_config {
  std::string socket_path;  ///< empty: the default rules of socket_path.hpp
  mode_t socket_mode = 0600;
  std::string log_level = "info";
  /// Whether a client may open a named allocation that a client of another uid created.
  bool open_across_users = false;
  /// Replies queued for a client that does not read them, before it is disconnected.
  std::uint64_t max_output_bytes = 4 << 20;
  std::vector<pool_config> pools;
};

struct config_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// @brief One host pool named "host" of 1 GiB; CUDA pools are added per visible device.
daemon_config embedded_default_config();

/// @brief Reads a YAML file. Unknown keys, bad sizes and duplicate pool names are errors.
/// @throws config_error naming the file, the key and the problem.
daemon_config load_config_file(const std::string& path);

/// @brief Parses "4096", "64KiB", "1.5GiB", "2MB" into bytes.
/// @throws config_error on anything else.
std::uint64_t parse_size(const std::string& text);

}  // namespace gpumem::daemon
