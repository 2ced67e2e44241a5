#pragma once
/// @file
/// @brief gpumemctl's exit statuses, described once: `--help` lists them from this table, the
/// README and the man page document the same numbers, and each failure maps onto one.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "gpumem/gpumem.hpp"

namespace gpumemctl {

enum class exit_status : int {
  ok = 0,
  failed = 1,             ///< any other failure the daemon or the library reported
  bad_arguments = 2,      ///< the command line, or a name or value the daemon refused as such
  no_daemon = 3,          ///< no gpumemd answers at the socket, or the connection broke
  not_found = 4,          ///< no object of that name
  permission_denied = 5,  ///< this user may not do it, or may not use that socket
  busy = 6,               ///< the object is in use or in a state that does not allow it
};

struct exit_status_row {
  exit_status status;
  std::string_view meaning;
};

inline constexpr exit_status_row kExitStatuses[] = {
    {exit_status::ok, "success"},
    {exit_status::failed, "any other error reported by gpumemd or libgpumem"},
    {exit_status::bad_arguments, "bad arguments: unknown command or option, invalid name or value"},
    {exit_status::no_daemon, "gpumemd not running: nothing answers at the socket, or it went away"},
    {exit_status::not_found, "not found: no lock, reservation or other object of that name"},
    {exit_status::permission_denied, "permission denied: this user may not do it or reach it"},
    {exit_status::busy,
     "busy: in use, not in a state that allows it (e.g. already asleep), or gpumemd has as many "
     "connections as it may"},
};

/// gpumemctl leaves SIGINT and SIGTERM to end it, so a shell reports 128 + the signal.
inline constexpr std::string_view kInterruptedNote =
    "  130 (128 + the signal) interrupted by Ctrl-C; a sleep or wake it waited for goes on in "
    "gpumemd";

/// @brief The "Exit status:" section of `--help`, a line per status and kInterruptedNote.
std::string exit_statuses_text();

/// @brief How connecting failed: permission_denied and invalid_argument (a bad socket path or
/// environment) keep their meaning; any other failure means no usable daemon answered.
exit_status connect_failure(gpumem::errc code);
/// @brief How a request to a daemon that answered failed.
exit_status request_failure(gpumem::errc code);

/// @brief The code's name in the protocol's table: "not_found", "permission_denied".
std::string_view errc_name(gpumem::errc code);

/// @brief What `--json` prints for a failure, on stdout:
/// `{"error": {"code": "not_found", "message": "...", "exit_code": 4}}`.
nlohmann::json error_json(std::string_view code, std::string_view message, exit_status status);

}  // namespace gpumemctl
