#pragma once
/// @file
/// @brief Where the daemon's socket lives when nobody says, and who may own it.
///
/// Rules, first match wins: `$GPUMEM_SOCKET`; `/run/gpumemd/gpumemd.sock` for root;
/// `$XDG_RUNTIME_DIR/gpumemd.sock`; `/tmp/gpumemd-<uid>/gpumemd.sock`. A client that finds no
/// socket at its per-user path, or one of an owner it does not trust, but finds the system
/// daemon's uses that one.
///
/// Ownership: a folder under /tmp can be made by anyone, and whoever owns the socket's folder
/// can replace the socket with one of their own. So the daemon listens only in a folder that
/// it or root owns and that nobody else may write to (sticky folders such as /tmp excepted),
/// and a client talks only to a socket, folder and listening process of a uid it trusts.

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gpumem {

inline constexpr const char* kSocketEnv = "GPUMEM_SOCKET";
inline constexpr const char* kSystemSocketPath = "/run/gpumemd/gpumemd.sock";
/// The uid (or user name) a client expects its daemon to run as, instead of the defaults.
inline constexpr const char* kDaemonUidEnv = "GPUMEM_DAEMON_UID";
/// The service's user (deploy/sysusers.conf): clients trust it by default.
inline constexpr const char* kServiceUser = "gpumemd";

/// @brief The path a daemon listens on when neither flag nor config names one.
std::string default_daemon_socket_path();

/// @brief The path a client connects to when the caller names none.
std::string default_client_socket_path();

/// @brief Of the caller's own path @p own and the system daemon's @p system: @p system when it
/// is a socket and @p own is none, or one of an owner that the caller's client would refuse
/// (untrusted_socket() with the default trusted uids); else @p own.
std::string client_socket_among(const std::string& own, const std::string& system);

/// @brief Why the daemon (running as @p daemon_uid) must not listen in the folder of
/// @p socket_path, with how to fix it; empty when it may. The folder must belong to
/// @p daemon_uid or root, and nobody else may write to it unless it is sticky.
std::string unsafe_socket_folder(const std::string& socket_path, uid_t daemon_uid);

/// @brief The uids a client accepts as its daemon's: root and @p configured when it is 0 or
/// more; else root and the uid $GPUMEM_DAEMON_UID names; else root, the caller's own uid and
/// the service user's. @throws std::invalid_argument when $GPUMEM_DAEMON_UID names no user.
std::vector<uid_t> trusted_daemon_uids(std::int64_t configured);

/// @brief "root or uid 1000 (alice)": the trusted uids, for error messages.
std::string describe_uids(std::span<const uid_t> uids);

/// @brief Why a client must not talk to the socket at @p path: its file or its folder belongs
/// to a uid outside @p trusted; the text names the path, the owner found and the owners
/// expected. Empty when it may (and when the path does not exist: connecting will say so).
std::string untrusted_socket(const std::string& path, std::span<const uid_t> trusted);

}  // namespace gpumem
