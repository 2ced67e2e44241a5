#pragma once
/// @file
/// @brief daemon/log/: where gpumemd's log lines go.
///
/// Under systemd, with stderr connected to the journal ($JOURNAL_STREAM names stderr's device
/// and inode, systemd.exec(5)), each line starts with its syslog priority the sd-daemon(3) way
/// ("<6>" for info) and carries no timestamp of its own: the journal stamps it and filters by
/// priority (journalctl -p warning). Anywhere else lines go to stderr as ever, with their
/// timestamp and level. No libsystemd: the prefix is the whole protocol.
/// May include: third-party headers only. Included by main.cpp.

#include <spdlog/common.h>
#include <spdlog/logger.h>

#include <memory>
#include <string_view>

namespace gpumem::daemon::log {

/// @brief The syslog priority of a level: trace and debug 7, info 6, warn 4, error 3,
/// critical 2.
int syslog_priority(spdlog::level::level_enum level) noexcept;

/// @brief Whether @p journal_stream ("DEV:INO", decimal) names the file stderr is.
bool names_stderr(std::string_view journal_stream) noexcept;

/// @brief The daemon's logger, named "gpumemd": to the journal with priority prefixes when
/// $JOURNAL_STREAM names stderr, else to stderr with timestamps (colours on a terminal).
std::shared_ptr<spdlog::logger> make_daemon_logger();

}  // namespace gpumem::daemon::log
