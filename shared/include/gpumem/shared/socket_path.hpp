#pragma once
/// @file
/// @brief Where the daemon's socket lives when nobody says.
///
/// Rules, first match wins: `$GPUMEM_SOCKET`; `/run/gpumemd/gpumemd.sock` for root;
/// `$XDG_RUNTIME_DIR/gpumemd.sock`; `/tmp/gpumemd-<uid>/gpumemd.sock`. A client that finds no
/// socket at its per-user path but finds the system daemon's uses that one.

#include <string>

namespace gpumem {

inline constexpr const char* kSocketEnv = "GPUMEM_SOCKET";
inline constexpr const char* kSystemSocketPath = "/run/gpumemd/gpumemd.sock";

/// @brief The path a daemon listens on when neither flag nor config names one.
std::string default_daemon_socket_path();

/// @brief The path a client connects to when the caller names none.
std::string default_client_socket_path();

}  // namespace gpumem
