#pragma once
/// @file
/// @brief The seccomp program that stands in for systemd's SystemCallFilter=,
/// SystemCallArchitectures=native, RestrictAddressFamilies= and MemoryDenyWriteExecute=.
///
/// Everything those settings would refuse is sent to a supervisor (SECCOMP_RET_USER_NOTIF)
/// instead of failing in the kernel, so one supervisor decides, records and names each refusal
/// (supervisor.hpp); only a foreign architecture is killed in the kernel, as systemd does.

#include <linux/filter.h>

#include <map>
#include <string>
#include <vector>

#include "unit_settings.hpp"

namespace gpumem::sandbox {

/// @brief This machine's system call numbers by name, read from <sys/syscall.h> at build time.
const std::map<std::string, int>& syscall_numbers();
/// @brief The name of system call @p number, or its number as text.
std::string syscall_name(int number);

/// @brief Whether @p settings need a seccomp program at all.
bool needs_filter(const unit_settings& settings);

/// @brief The numbers @p settings allow: SystemCallFilter='s expansion, plus the calls systemd
/// always allows (execve, exit, rt_sigreturn, time queries and sleeps). Empty: no filter.
std::vector<int> allowed_syscall_numbers(const unit_settings& settings);

/// @brief The program, for SECCOMP_SET_MODE_FILTER.
std::vector<sock_filter> build_filter(const unit_settings& settings);

}  // namespace gpumem::sandbox
