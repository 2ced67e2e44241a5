#include "config/config.hpp"

#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <spdlog/common.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <span>
#include <type_traits>

#include "config/config_keys.hpp"
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
// Milliseconds per unit; "ms" before "s", which it ends with.
constexpr unit kDurationUnits[] = {{"ms", 1}, {"min", 60000}, {"s", 1000}};
constexpr std::uint64_t kLongestDuration = std::uint64_t{1} << 40;  // about 35 years of ms

// The C++ type a value_type reads as must be the one its row's landing takes.
template <class Value>
constexpr bool reads_as(value_type type) {
  switch (type) {
    case value_type::text:
    case value_type::log_level:
    case value_type::pool_name:
      return std::is_same_v<Value, std::string>;
    case value_type::octal_mode:
      return std::is_same_v<Value, mode_t>;
    case value_type::boolean:
      return std::is_same_v<Value, bool>;
    case value_type::size:
    case value_type::nonzero_size:
    case value_type::count:
      return std::is_same_v<Value, std::uint64_t>;
    case value_type::duration:
      return std::is_same_v<Value, std::chrono::milliseconds>;
    case value_type::device:
      return std::is_same_v<Value, std::int32_t>;
    case value_type::cuda_devices:
      return std::is_same_v<Value, std::vector<std::int32_t>>;
    case value_type::pools:
      return std::is_same_v<Value, std::vector<pool_config>>;
    case value_type::users:
    case value_type::groups:
      return std::is_same_v<Value, std::vector<uid_t>>;
    case value_type::group:
      return std::is_same_v<Value, std::optional<gid_t>>;
    case value_type::size_limit:
    case value_type::count_limit:
      return std::is_same_v<Value, std::optional<std::uint64_t>>;
    case value_type::access:
      return std::is_same_v<Value, access_config>;
    case value_type::quotas:
      return std::is_same_v<Value, quota_config>;
  }
  return false;
}

template <class Landing>
struct landing_value;
template <class Config, class Value>
struct landing_value<Value Config::*> {
  using type = Value;
};
template <class Config, class Value>
struct landing_value<void (*)(Config&, Value)> {
  using type = Value;
};

template <class Config>
constexpr bool every_row_lands_what_it_reads(std::span<const config_key<Config>> keys) {
  return std::ranges::all_of(keys, [](const config_key<Config>& row) {
    return std::visit(
        [&](auto landing) {
          return reads_as<typename landing_value<decltype(landing)>::type>(row.type);
        },
        row.lands_in);
  });
}
static_assert(every_row_lands_what_it_reads<daemon_config>(kDaemonKeys));
static_assert(every_row_lands_what_it_reads<pool_config>(kPoolKeys));
static_assert(every_row_lands_what_it_reads<access_config>(kAccessKeys));
static_assert(every_row_lands_what_it_reads<quota_limits>(kQuotaKeys));

/// Where a value sits, for errors: "gpumemd.yaml: pools[0].size".
struct location {
  std::string file;
  std::string path;  ///< empty at the top level

  location key(std::string_view name) const {
    return {file, path.empty() ? std::string(name) : path + "." + std::string(name)};
  }
  location element(std::size_t index) const {
    return {file, path + "[" + std::to_string(index) + "]"};
  }
  std::string text() const { return path.empty() ? file : file + ": " + path; }
};

[[noreturn]] void fail(const location& where, const std::string& problem) {
  throw config_error(where.text() + ": " + problem);
}

std::string read_scalar(const YAML::Node& node, const location& where) {
  if (node.IsNull()) fail(where, "has no value");
  if (!node.IsScalar()) fail(where, "is a single value, not a list or a map");
  return node.Scalar();
}

std::string read_text(value_type type, const YAML::Node& node, const location& where) {
  std::string text = read_scalar(node, where);
  if (type == value_type::log_level && spdlog::level::from_str(text) == spdlog::level::off &&
      text != "off") {
    fail(where,
         "'" + text + "' is not a log level (trace, debug, info, warn, error, critical, off)");
  }
  if (proto::wire_name check;
      type == value_type::pool_name && (text.empty() || proto::make_wire_name(text, check))) {
    fail(where, "'" + text + "' is not a valid name (1-63 of [A-Za-z0-9._:/@+-])");
  }
  return text;
}

mode_t read_octal_mode(const YAML::Node& node, const location& where) {
  const auto text = read_scalar(node, where);
  std::size_t used = 0;
  unsigned long mode = 0;
  try {
    mode = std::stoul(text, &used, 8);
  } catch (const std::exception&) {
  }
  if (used != text.size() || mode > 0777) fail(where, "'" + text + "' is not an octal mode");
  return static_cast<mode_t>(mode);
}

bool read_boolean(const YAML::Node& node, const location& where) {
  const auto text = read_scalar(node, where);
  try {
    return node.as<bool>();
  } catch (const YAML::Exception&) {
    fail(where, "'" + text + "' is not true or false");
  }
}

std::uint64_t read_count(const YAML::Node& node, const location& where) {
  const auto text = read_scalar(node, where);
  std::uint64_t count = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (error != std::errc{} || end != text.data() + text.size() || count == 0) {
    fail(where, "'" + text + "' is not a whole number above 0");
  }
  return count;
}

std::chrono::milliseconds read_duration(const YAML::Node& node, const location& where) {
  const auto text = read_scalar(node, where);
  for (const auto& [suffix, factor] : kDurationUnits) {
    const std::string_view s(suffix);
    if (text.size() <= s.size() || text.compare(text.size() - s.size(), s.size(), s) != 0) {
      continue;
    }
    const auto number = std::string_view(text).substr(0, text.size() - s.size());
    std::uint64_t amount = 0;
    const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), amount);
    if (error != std::errc{} || end != number.data() + number.size()) break;
    if (amount == 0 || amount > kLongestDuration / factor) break;
    return std::chrono::milliseconds(amount * factor);
  }
  fail(where, "'" + text + "' is not a duration above 0 (a whole number and ms, s or min)");
}

std::uint64_t read_size(value_type type, const YAML::Node& node, const location& where) {
  if (type == value_type::count) return read_count(node, where);
  const std::string text = read_scalar(node, where);
  std::uint64_t bytes = 0;
  try {
    bytes = parse_size(text);
  } catch (const config_error& error) {
    fail(where, error.what());
  }
  if (type == value_type::nonzero_size && bytes == 0) fail(where, "must be positive");
  return bytes;
}

std::int32_t read_device(const YAML::Node& node, const location& where) {
  const auto text = read_scalar(node, where);
  if (text == "host") return proto::kHostDevice;
  try {
    const int device = node.as<int>();
    if (device >= 0) return device;
  } catch (const YAML::Exception&) {
  }
  fail(where, "'" + text + "' is not a device (use host or a CUDA device number)");
}

std::vector<std::int32_t> read_cuda_devices(const YAML::Node& node, const location& where) {
  if (!node.IsSequence()) fail(where, "is a list of CUDA device numbers");
  std::vector<std::int32_t> devices;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const auto device = read_device(node[i], where.element(i));
    if (device == proto::kHostDevice) fail(where, "lists CUDA devices only");
    devices.push_back(device);
  }
  return devices;
}

std::vector<pool_config> read_pools(const YAML::Node& node, const location& where);
access_config read_access(const YAML::Node& node, const location& where);
quota_config read_quotas(const YAML::Node& node, const location& where);

/// A user or group by name or number: "alice", "1001".
std::optional<std::uint32_t> account_number(const std::string& text, bool group) {
  if (!text.empty() && text.size() < 10 && std::all_of(text.begin(), text.end(), ::isdigit)) {
    return static_cast<std::uint32_t>(std::stoul(text));
  }
  if (group) {
    if (const ::group* found = ::getgrnam(text.c_str())) return found->gr_gid;
  } else if (const ::passwd* found = ::getpwnam(text.c_str())) {
    return found->pw_uid;
  }
  return std::nullopt;
}

std::uint32_t read_account(bool group, const YAML::Node& node, const location& where) {
  const auto text = read_scalar(node, where);
  if (const auto number = account_number(text, group)) return *number;
  fail(where, "'" + text +
                  (group ? "' is no group of this machine (a name or a gid)"
                         : "' is no user of this machine (a name or a uid)"));
}

std::vector<uid_t> read_accounts(value_type type, const YAML::Node& node, const location& where) {
  const bool group = type == value_type::groups;
  if (!node.IsSequence()) fail(where, group ? "is a list of groups" : "is a list of users");
  std::vector<uid_t> ids;
  for (std::size_t i = 0; i < node.size(); ++i) {
    ids.push_back(read_account(group, node[i], where.element(i)));
  }
  return ids;
}

std::optional<gid_t> read_group(const YAML::Node& node, const location& where) {
  if (node.IsScalar() && node.Scalar().empty()) return std::nullopt;
  return read_account(true, node, where);
}

std::optional<std::uint64_t> read_limit(value_type type, const YAML::Node& node,
                                        const location& where) {
  const auto text = read_scalar(node, where);
  if (text == "unlimited") return std::nullopt;
  if (type == value_type::size_limit) return read_size(value_type::size, node, where);
  if (!text.empty() && text.size() < 20 && std::all_of(text.begin(), text.end(), ::isdigit)) {
    return std::stoull(text);
  }
  fail(where, "'" + text + "' is not a count (a whole number, or unlimited)");
}

template <class Value>
Value read_value(value_type type, const YAML::Node& node, const location& where) {
  if constexpr (std::is_same_v<Value, std::string>) {
    return read_text(type, node, where);
  } else if constexpr (std::is_same_v<Value, mode_t>) {
    return read_octal_mode(node, where);
  } else if constexpr (std::is_same_v<Value, bool>) {
    return read_boolean(node, where);
  } else if constexpr (std::is_same_v<Value, std::uint64_t>) {
    return read_size(type, node, where);
  } else if constexpr (std::is_same_v<Value, std::int32_t>) {
    return read_device(node, where);
  } else if constexpr (std::is_same_v<Value, std::vector<std::int32_t>>) {
    return read_cuda_devices(node, where);
  } else if constexpr (std::is_same_v<Value, std::vector<uid_t>>) {
    return read_accounts(type, node, where);
  } else if constexpr (std::is_same_v<Value, std::optional<gid_t>>) {
    return read_group(node, where);
  } else if constexpr (std::is_same_v<Value, std::optional<std::uint64_t>>) {
    return read_limit(type, node, where);
  } else if constexpr (std::is_same_v<Value, access_config>) {
    return read_access(node, where);
  } else if constexpr (std::is_same_v<Value, quota_config>) {
    return read_quotas(node, where);
  } else if constexpr (std::is_same_v<Value, std::chrono::milliseconds>) {
    return read_duration(node, where);
  } else {
    static_assert(std::is_same_v<Value, std::vector<pool_config>>);
    return read_pools(node, where);
  }
}

/// "256KiB" for a whole number of a binary unit, else bytes.
std::string size_text(std::uint64_t bytes) {
  for (const auto& [suffix, factor] : kUnits) {
    if (suffix[1] == 'i' && bytes >= factor && bytes % factor == 0) {
      return std::to_string(bytes / factor) + suffix;
    }
  }
  return std::to_string(bytes);
}

template <class Config, class Value>
void check_minimum(const config_key<Config>& row, const Value& value, const location& where) {
  std::uint64_t amount = 0;
  std::string (*text)(std::uint64_t) = nullptr;
  if constexpr (std::is_same_v<Value, std::chrono::milliseconds>) {
    amount = static_cast<std::uint64_t>(value.count());
    text = [](std::uint64_t ms) { return std::to_string(ms) + "ms"; };
  } else if constexpr (std::is_same_v<Value, std::uint64_t>) {
    amount = value;
    text = row.type == value_type::count ? [](std::uint64_t n) { return std::to_string(n); }
                                         : size_text;
  } else {
    return;
  }
  if (amount < row.minimum) {
    fail(where, text(amount) + " is below the minimum of " + text(row.minimum) + " (" +
                    std::string(row.minimum_reason) + ")");
  }
}

template <class Config>
void store(Config& config, const config_key<Config>& row, const YAML::Node& node,
           const location& where) {
  std::visit(
      [&](auto landing) {
        using value = typename landing_value<decltype(landing)>::type;
        value read = read_value<value>(row.type, node, where);
        check_minimum(row, read, where);
        if constexpr (std::is_member_object_pointer_v<decltype(landing)>) {
          config.*landing = std::move(read);
        } else {
          landing(config, std::move(read));
        }
      },
      row.lands_in);
}

/// Reads a map whose keys are @p keys into @p config; a key left out takes its default.
/// The keys of map @p node. yaml-cpp keeps a key given twice and answers node[key] with one of
/// them, so the other would be dropped without a word: it is an error instead.
std::vector<std::string> keys_of(const YAML::Node& node, const location& where) {
  std::vector<std::string> keys;
  for (const auto& item : node) {
    const std::string key = read_scalar(item.first, where.key("(a key)"));
    if (std::ranges::find(keys, key) != keys.end()) {
      fail(where.key(key), "is given twice (YAML would keep only one of them)");
    }
    keys.push_back(key);
  }
  return keys;
}

template <class Config>
void read_map(const YAML::Node& node, std::span<const config_key<Config>> keys,
              const location& where, Config& config) {
  for (const std::string& key : keys_of(node, where)) {
    if (std::ranges::none_of(keys, [&](const config_key<Config>& row) { return row.key == key; })) {
      std::string known;
      for (const auto& row : keys) known += (known.empty() ? "" : ", ") + std::string(row.key);
      fail(where, "unknown key '" + key + "' (the keys are " + known + ")");
    }
  }
  for (const auto& row : keys) {
    const std::string key(row.key);
    if (const YAML::Node value = node[key]) {
      store(config, row, value, where.key(key));
    } else if (row.required) {
      fail(where, "missing '" + key + "'");
    } else if (!row.default_value.empty()) {
      store(config, row, YAML::Load(std::string(row.default_value)), where.key(key));
    }
  }
}

/// The machine's memory (MemTotal): a host pool larger than it can never be filled.
std::uint64_t machine_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
}

/// What no single key can tell: the keys of one pool together, and the pool against the machine.
void check_pool(const pool_config& pool, const location& entry) {
  if (pool.release_threshold > pool.size) {
    fail(entry.key("release_threshold"), size_text(pool.release_threshold) +
                                             " is above the pool's size (" + size_text(pool.size) +
                                             "): a pool keeps at most its size for reuse");
  }
  if (const std::uint64_t memory = machine_memory();
      pool.device == proto::kHostDevice && pool.size > memory) {
    fail(entry.key("size"), size_text(pool.size) + " is more than this machine's memory (" +
                                std::to_string(memory >> 20) + " MiB): a host pool lives in it");
  }
}

std::vector<pool_config> read_pools(const YAML::Node& node, const location& where) {
  if (!node.IsSequence()) fail(where, "is a list");
  if (node.size() == 0) {
    fail(where, "lists no pool: list at least one, or leave the key out for the default host pool");
  }
  std::vector<pool_config> pools;
  std::set<std::string> names;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const location entry = where.element(i);
    if (!node[i].IsMap()) fail(entry, "a pool is a map");
    read_map<pool_config>(node[i], kPoolKeys, entry, pools.emplace_back());
    if (!names.insert(pools.back().name).second) {
      fail(entry, "duplicate pool name '" + pools.back().name + "'");
    }
    check_pool(pools.back(), entry);
  }
  return pools;
}

access_config read_access(const YAML::Node& node, const location& where) {
  if (!node.IsMap()) fail(where, "is a map with the keys connect_users, connect_groups, ...");
  access_config access;
  read_map<access_config>(node, kAccessKeys, where, access);
  return access;
}

std::string_view default_quotas_yaml() {
  for (const auto& row : kDaemonKeys) {
    if (row.type == value_type::quotas) return row.default_value;
  }
  return {};
}

quota_config read_quotas(const YAML::Node& node, const location& where) {
  if (!node.IsMap()) fail(where, "is a map of entries: default, client, uid:N, group:NAME, ...");
  quota_config quotas;
  if (!node["default"]) {
    quotas =
        read_quotas(YAML::Load(std::string(default_quotas_yaml())), {"the default quotas", ""});
  }
  keys_of(node, where);
  for (const auto& item : node) {
    const auto key = item.first.as<std::string>();
    const location entry = where.key(key);
    if (!item.second.IsMap()) fail(entry, "a quota is a map with the keys bytes, allocations, ...");
    quota_limits limits;
    read_map<quota_limits>(item.second, kQuotaKeys, entry, limits);
    const auto colon = key.find(':');
    const std::string prefix = key.substr(0, colon);
    const std::string who = colon == std::string::npos ? "" : key.substr(colon + 1);
    const bool numeric_only = prefix == "uid" || prefix == "gid";
    const auto number = [&](bool group) {
      const auto found = account_number(who, group);
      if (!found || (numeric_only && !std::all_of(who.begin(), who.end(), ::isdigit))) {
        fail(entry, "'" + who + "' is no " + (group ? "group" : "user") + " of this machine");
      }
      return *found;
    };
    bool fresh = true;
    if (key == "default") {
      quotas.per_uid = limits;
    } else if (key == "client") {
      quotas.per_client = limits;
    } else if (prefix == "uid" || prefix == "user") {
      fresh = quotas.uids.emplace(number(false), limits).second;
    } else if (prefix == "gid" || prefix == "group") {
      fresh = quotas.gids.emplace(number(true), limits).second;
    } else {
      fail(entry, "is not an entry (default, client, uid:N, user:NAME, gid:N, group:NAME)");
    }
    if (!fresh) fail(entry, "names an account another entry names too");
  }
  return quotas;
}

daemon_config read_config(const YAML::Node& root, const location& where) {
  daemon_config config;
  read_map<daemon_config>(root, kDaemonKeys, where, config);
  return config;
}

// A commented pool with every pool key, each with its description and whether it is required
// or what it defaults to.
std::string example_pool_yaml() {
  std::size_t width = 0;
  for (const auto& row : kPoolKeys) width = std::max(width, row.key.size() + row.example.size());
  std::string out =
      "\n  # A CUDA pool with every key a pool takes. Listing one replaces the per-device pools.\n";
  for (const auto& row : kPoolKeys) {
    out += &row == &kPoolKeys[0] ? "  # - " : "  #   ";
    out += std::string(row.key) + ": " + std::string(row.example);
    out += std::string(width - row.key.size() - row.example.size() + 2, ' ');
    out += "# " + std::string(row.description);
    if (row.required) out += "; required";
    if (!row.default_value.empty()) out += "; default: " + std::string(row.default_value);
    out += "\n";
  }
  return out;
}
}  // namespace

daemon_config embedded_default_config() {
  return read_config(YAML::Node(YAML::NodeType::Map), {"the embedded default", ""});
}

pool_config default_cuda_pool(std::int32_t device, std::uint64_t device_bytes) {
  const std::string name = "cuda" + std::to_string(device);
  YAML::Node entry(YAML::NodeType::Map);
  entry["name"] = name;
  entry["device"] = device;
  entry["size"] = device_bytes;
  pool_config pool;
  read_map<pool_config>(entry, kPoolKeys, {"the default pool " + name, ""}, pool);
  return pool;
}

std::string default_config_yaml() {
  std::string out =
      "# gpumemd configuration: every key at its default, as gpumemd --print-default-config\n"
      "# prints it. Every key may be left out; with no file at all gpumemd runs this.\n"
      "# Sizes are bytes or a number and a unit: B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB).\n";
  for (const auto& row : kDaemonKeys) {
    out += "\n# " + std::string(row.description) + "\n" + std::string(row.key) + ":";
    const std::string_view value = row.default_value;
    if (value.find('\n') == std::string_view::npos) {
      out += " " + std::string(value) + "\n";
    } else {
      // A block value (the pools) goes on the lines below its key, indented.
      for (std::size_t begin = 0; begin < value.size();) {
        const auto end = std::min(value.find('\n', begin), value.size());
        out += "\n  " + std::string(value.substr(begin, end - begin));
        begin = end + 1;
      }
      out += "\n";
    }
    if (row.type == value_type::pools) out += example_pool_yaml();
  }
  return out;
}

void set_key(daemon_config& config, std::string_view key, const std::string& value,
             std::string_view source) {
  for (const auto& row : kDaemonKeys) {
    if (row.key == key) return store(config, row, YAML::Node(value), {std::string(source), ""});
  }
  throw config_error(std::string(source) + ": no configuration key '" + std::string(key) + "'");
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

std::vector<std::string> config_notices(const daemon_config& config) {
  std::vector<std::string> notices;
  for (std::size_t i = 0; i < config.pools.size(); ++i) {
    const pool_config& pool = config.pools[i];
    if (pool.release_threshold == pool.size) continue;
    // Measured on an H200 (driver 580): with a threshold of 0 the device holds the memory of a
    // freed exported block as with the default, while the pool's reserved figure reads 0.
    notices.push_back(fmt::format(
        "pools[{}] ('{}').release_threshold: {} has no effect: a host pool gives freed pages "
        "back as it frees them, and a CUDA IPC pool keeps the memory of exported blocks (all of a "
        "gpumemd pool's) whatever it says; below the size it only makes the driver's reserved "
        "figure for the pool read low. Leave it out.",
        i, pool.name, size_text(pool.release_threshold)));
  }
  // A notice rather than an error: a configuration that ran before fd_store_max existed must
  // not stop a restart, which would lose the state the fd store keeps.
  constexpr std::uint64_t kBesideConnections =
      kFdStoreKeptForTheDaemon + kFdStoreLeastForReservations;
  if (config.max_connections > config.fd_store_max ||
      config.fd_store_max - config.max_connections < kBesideConnections) {
    notices.push_back(fmt::format(
        "fd_store_max {} leaves reservations, pool instances and lock pages little or no room "
        "beside max_connections {} (a pidfd each) and the {} descriptors held back for the "
        "daemon: they are refused (quota_exceeded). Make fd_store_max at least max_connections + "
        "{}, with the unit's FileDescriptorStoreMax, or lower max_connections",
        config.fd_store_max, config.max_connections, kFdStoreKeptForTheDaemon, kBesideConnections));
  }
  return notices;
}

daemon_config load_config_file(const std::string& path) {
  // Checked here rather than by the command line's parser, so that a missing file is reported
  // (and exits) like every other configuration error.
  std::ifstream stream(path);
  if (!stream) throw config_error(path + ": cannot be read: " + std::strerror(errno));
  if (std::error_code ignored; std::filesystem::is_directory(path, ignored)) {
    throw config_error(path + ": is a folder, not a file");
  }
  YAML::Node root;
  try {
    root = YAML::Load(stream);
  } catch (const YAML::Exception& error) {
    throw config_error(path + ": " + error.what());
  }
  if (root.IsNull()) return embedded_default_config();
  const location file{path, ""};
  if (!root.IsMap()) fail(file, "the top level is a map");
  try {
    return read_config(root, file);
  } catch (const YAML::Exception& error) {
    fail(file, error.what());
  }
}

}  // namespace gpumem::daemon
