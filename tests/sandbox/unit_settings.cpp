#include "unit_settings.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>

namespace gpumem::sandbox {

namespace {

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return std::string(text.substr(first, last - first + 1));
}

std::vector<std::string> words(const std::string& value) {
  std::istringstream in(value);
  std::vector<std::string> all;
  for (std::string word; in >> word;) all.push_back(word);
  return all;
}

bool yes(const std::string& value) {
  return value == "yes" || value == "true" || value == "1" || value == "on";
}

/// Settings of the unit that change what the service sees but not whether gpumemd can do
/// its work; reproducing them would need systemd's mount and cgroup machinery.
constexpr std::array kLeftOut{"ProtectSystem",
                              "ProtectHome",
                              "PrivateTmp",
                              "PrivateDevices",
                              "DevicePolicy",
                              "DeviceAllow",
                              "ProtectKernelTunables",
                              "ProtectKernelModules",
                              "ProtectKernelLogs",
                              "ProtectControlGroups",
                              "ProtectClock",
                              "ProtectHostname",
                              "RestrictNamespaces",
                              "RestrictRealtime",
                              "RestrictSUIDSGID",
                              "LockPersonality",
                              "PrivateUsers",
                              "PrivateMounts",
                              "RemoveIPC",
                              "IPAddressDeny",
                              "UMask",
                              "KeyringMode",
                              "PrivateIPC",
                              "ProtectKernelTunables"};

int address_family(const std::string& name, const std::string& where) {
  static const std::map<std::string, int> kFamilies{{"AF_UNIX", AF_UNIX},
                                                    {"AF_INET", AF_INET},
                                                    {"AF_INET6", AF_INET6},
                                                    {"AF_NETLINK", AF_NETLINK},
                                                    {"AF_PACKET", AF_PACKET}};
  const auto found = kFamilies.find(name);
  if (found == kFamilies.end()) {
    throw std::runtime_error(where + ": address family " + name + " is not one unit_sandbox knows");
  }
  return found->second;
}

int error_number(const std::string& name, const std::string& where) {
  static const std::map<std::string, int> kErrors{
      {"EPERM", EPERM}, {"EACCES", EACCES}, {"ENOSYS", ENOSYS}, {"EINVAL", EINVAL}};
  if (name == "kill") return 0;
  const auto found = kErrors.find(name);
  if (found == kErrors.end()) {
    throw std::runtime_error(where + ": " + name + " is not an errno unit_sandbox knows");
  }
  return found->second;
}

std::set<std::string> read_syscall_names(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot be read");
  std::set<std::string> names;
  for (std::string line; std::getline(in, line);) {
    line = trim(line.substr(0, line.find('#')));
    if (!line.empty()) names.insert(line);
  }
  if (names.empty()) throw std::runtime_error(path + ": names no system call");
  return names;
}

}  // namespace

unit_settings read_unit_settings(const std::string& unit_path, const std::string& syscalls_path) {
  std::ifstream in(unit_path);
  if (!in) throw std::runtime_error(unit_path + ": cannot be read");
  unit_settings settings;
  bool in_service = false;
  bool has_syscall_filter = false;
  std::string hidepid;
  std::string subset;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      in_service = line == "[Service]";
      continue;
    }
    if (!in_service) continue;
    const auto equals = line.find('=');
    if (equals == std::string::npos) continue;
    const std::string key = trim(std::string_view(line).substr(0, equals));
    const std::string value = trim(std::string_view(line).substr(equals + 1));
    const std::string where = unit_path + ":" + std::to_string(line_number) + ": " + key;
    if (key == "SystemCallFilter") {
      has_syscall_filter = true;
    } else if (key == "SystemCallErrorNumber") {
      settings.filtered_call_error = error_number(value, where);
    } else if (key == "SystemCallArchitectures") {
      if (value != "native") throw std::runtime_error(where + ": only `native` is reproduced");
      settings.native_architecture_only = true;
    } else if (key == "RestrictAddressFamilies") {
      for (const auto& name : words(value)) {
        if (name.starts_with('~'))
          throw std::runtime_error(where + ": deny lists are not reproduced");
        settings.address_families.push_back(address_family(name, where));
      }
    } else if (key == "MemoryDenyWriteExecute") {
      settings.memory_deny_write_execute = yes(value);
    } else if (key == "NoNewPrivileges") {
      settings.no_new_privileges = yes(value);
    } else if (key == "CapabilityBoundingSet") {
      if (!value.empty()) {
        throw std::runtime_error(where + ": only an empty set (no capability) is reproduced");
      }
      settings.drop_all_capabilities = true;
    } else if (key == "PrivateNetwork") {
      settings.private_network = yes(value);
    } else if (key == "ProtectProc") {
      if (value != "default") hidepid = value;
    } else if (key == "ProcSubset") {
      if (value != "all") subset = value;
    } else if (std::ranges::find(kLeftOut, key) != kLeftOut.end()) {
      settings.not_reproduced.push_back(key);
    }
  }
  if (!hidepid.empty()) settings.proc_mount_options = "hidepid=" + hidepid;
  if (!subset.empty()) {
    settings.proc_mount_options +=
        (settings.proc_mount_options.empty() ? "" : ",") + std::string("subset=") + subset;
  }
  if (has_syscall_filter) {
    if (syscalls_path.empty()) {
      throw std::runtime_error(unit_path +
                               ": has SystemCallFilter=; give its expansion with --syscalls "
                               "(scripts/unit-syscalls writes it)");
    }
    settings.allowed_syscalls = read_syscall_names(syscalls_path);
  }
  return settings;
}

}  // namespace gpumem::sandbox
