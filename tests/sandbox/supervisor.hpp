#pragma once
/// @file
/// @brief The process that answers the sandboxed program's seccomp notifications: it names
/// each call the unit would refuse and either lets it run (audit: find every call the unit
/// would break on, in one run) or answers as systemd would (enforce: SystemCallErrorNumber= or
/// a killed process for a filtered call, EAFNOSUPPORT for an address family, EPERM for W+X
/// memory).

#include <string>

#include "unit_settings.hpp"

namespace gpumem::sandbox {

enum class mode { audit, enforce };

/// @brief Serves @p listener (a seccomp notification fd) until every sandboxed task has
/// ended, then appends one line per refused kind of call to @p report_path (stderr when
/// empty), or one line saying there was none, naming @p command.
void supervise(int listener, const unit_settings& settings, mode how, const std::string& command,
               const std::string& report_path);

}  // namespace gpumem::sandbox
