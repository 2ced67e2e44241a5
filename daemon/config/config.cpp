#include "config/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "gpumem/proto/wire.hpp"

namespace gpumem::daemon {

namespace {
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

struct unit {
  const char* suffix;
  std::uint64_t factor;
};
constexpr unit kUnits[] = {{"TiB", kGiB << 10}, {"GiB", kGiB},         {"MiB", 1 << 20},
                           {"KiB", 1 << 10},    {"TB", 1000000000000}, {"GB", 1000000000},
                           {"MB", 1000000},     {"KB", 1000},          {"B", 1}};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw config_error(where + ": " + what);
}

void check_keys(const YAML::Node& node, const std::string& where,
                std::initializer_list<const char*> known) {
  for (const auto& item : node) {
    const auto key = item.first.as<std::string>();
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      fail(where, "unknown key '" + key + "'");
    }
  }
}

std::int32_t parse_device(const YAML::Node& node, const std::string& where) {
  const auto text = node.as<std::string>();
  if (text == "host") return proto::kHostDevice;
  try {
    const int device = node.as<int>();
    if (device >= 0) return device;
  } catch (const YAML::Exception&) {
  }
  fail(where, "'" + text + "' is not a device (use host or a CUDA device number)");
}

pool_config parse_pool(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) fail(where, "a pool is a map");
  check_keys(node, where, {"name", "device", "size", "release_threshold", "peer_access"});
  pool_config pool;
  if (!node["name"]) fail(where, "missing 'name'");
  pool.name = node["name"].as<std::string>();
  if (proto::wire_name check; pool.name.empty() || proto::make_wire_name(pool.name, check)) {
    fail(where + ".name", "'" + pool.name + "' is not a valid name (1-63 of [A-Za-z0-9._:/@+-])");
  }
  if (!node["device"]) fail(where, "missing 'device'");
  pool.device = parse_device(node["device"], where + ".device");
  if (!node["size"]) fail(where, "missing 'size'");
  try {
    pool.size = parse_size(node["size"].as<std::string>());
    // Freed memory stays in the pool for reuse unless the operator asks for less.
    pool.release_threshold = pool.size;
    if (node["release_threshold"]) {
      pool.release_threshold = parse_size(node["release_threshold"].as<std::string>());
    }
  } catch (const config_error& error) {
    fail(where, error.what());
  }
  if (pool.size == 0) fail(where + ".size", "must be positive");
  if (const auto peers = node["peer_access"]) {
    for (const auto& peer : peers) {
      const auto device = parse_device(peer, where + ".peer_access");
      if (device == proto::kHostDevice) fail(where + ".peer_access", "lists CUDA devices only");
      pool.peer_access.push_back(device);
    }
  }
  return pool;
}
}  // namespace

daemon_config embedded_default_config() {
  daemon_config config;
  pool_config host;
  host.name = "host";
  host.size = kGiB;
  config.pools.push_back(host);
  return config;
}

std::uint64_t parse_size(const std::string& text) {
  for (const auto& [suffix, factor] : kUnits) {
    const std::string_view s(suffix);
    if (text.size() <= s.size() || text.compare(text.size() - s.size(), s.size(), s) != 0) {
      continue;
    }
    std::string number = text.substr(0, text.size() - s.size());
    while (!number.empty() && number.back() == ' ') number.pop_back();
    std::size_t used = 0;
    double value = -1;
    try {
      value = std::stod(number, &used);
    } catch (const std::exception&) {
    }
    if (used != number.size() || !(value >= 0) || value * double(factor) > 1.8e19) break;
    return static_cast<std::uint64_t>(std::llround(value * double(factor)));
  }
  if (!text.empty() && std::all_of(text.begin(), text.end(), ::isdigit) && text.size() < 20) {
    return std::stoull(text);
  }
  throw config_error("'" + text + "' is not a size (use bytes or a KiB, MiB, GiB, TiB suffix)");
}

daemon_config load_config_file(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& error) {
    throw config_error(path + ": " + error.what());
  }
  daemon_config config;
  if (root.IsNull()) return embedded_default_config();
  if (!root.IsMap()) fail(path, "the top level is a map");
  try {
    check_keys(
        root, path,
        {"socket", "socket_mode", "log_level", "open_across_users", "max_output_bytes", "pools"});
    if (root["socket"]) config.socket_path = root["socket"].as<std::string>();
    if (root["socket_mode"]) {
      const auto text = root["socket_mode"].as<std::string>();
      std::size_t used = 0;
      unsigned long mode = 0;
      try {
        mode = std::stoul(text, &used, 8);
      } catch (const std::exception&) {
      }
      if (used != text.size() || mode > 0777)
        fail(path + ": socket_mode", "'" + text + "' is not an octal mode");
      config.socket_mode = static_cast<mode_t>(mode);
    }
    if (root["log_level"]) config.log_level = root["log_level"].as<std::string>();
    if (root["open_across_users"]) config.open_across_users = root["open_across_users"].as<bool>();
    if (root["max_output_bytes"]) {
      config.max_output_bytes = parse_size(root["max_output_bytes"].as<std::string>());
    }
    if (const auto pools = root["pools"]) {
      if (!pools.IsSequence()) fail(path + ": pools", "is a list");
      std::set<std::string> names;
      for (std::size_t i = 0; i < pools.size(); ++i) {
        const std::string where = path + ": pools[" + std::to_string(i) + "]";
        config.pools.push_back(parse_pool(pools[i], where));
        if (!names.insert(config.pools.back().name).second) {
          fail(where, "duplicate pool name '" + config.pools.back().name + "'");
        }
      }
    } else {
      config.pools = embedded_default_config().pools;
    }
  } catch (const YAML::Exception& error) {
    fail(path, error.what());
  }
  return config;
}

}  // namespace gpumem::daemon
