#pragma once
/// @file
/// @brief The sandbox settings of a systemd service unit that unit_sandbox reproduces without
/// systemd: the ones that decide whether gpumemd can still do its work (system calls, address
/// families, W+X memory, capabilities, the network and /proc). Settings about the file system
/// view (ProtectSystem=, PrivateTmp=, ...) and device access (DeviceAllow=, a cgroup program)
/// are not reproduced: unit_sandbox prints which ones it left out.

#include <set>
#include <string>
#include <vector>

namespace gpumem::sandbox {

struct unit_settings {
  /// SystemCallFilter= expanded to syscall names by scripts/unit-syscalls (systemd-analyze
  /// knows the groups; the GPU machine has no systemd): empty means no filter.
  std::set<std::string> allowed_syscalls;
  /// SystemCallErrorNumber=: what a filtered call returns; 0: the process is killed (default).
  int filtered_call_error = 0;
  bool native_architecture_only = false;    ///< SystemCallArchitectures=native
  std::vector<int> address_families;        ///< RestrictAddressFamilies=; empty: any
  bool memory_deny_write_execute = false;   ///< MemoryDenyWriteExecute=yes
  bool no_new_privileges = false;           ///< NoNewPrivileges=yes
  bool drop_all_capabilities = false;       ///< CapabilityBoundingSet= (empty)
  bool private_network = false;             ///< PrivateNetwork=yes
  std::string proc_mount_options;           ///< from ProtectProc= and ProcSubset=
  std::vector<std::string> not_reproduced;  ///< keys present but left out, for the log
};

/// @brief Reads the [Service] section of @p unit_path and the expanded syscall list
/// @p syscalls_path (one name per line, `#` comments). Throws std::runtime_error naming the
/// file, the key and the value it cannot reproduce faithfully.
unit_settings read_unit_settings(const std::string& unit_path, const std::string& syscalls_path);

}  // namespace gpumem::sandbox
