#pragma once
/// @file
/// @brief daemon/systemd/: the protocols by which systemd and gpumemd speak, without
/// libsystemd (the GPU machines lack libsystemd-dev, and each protocol is a few documented
/// lines): notification and the fd store (notify.hpp, sd_notify(3)), the descriptors passed at
/// start (activation.hpp, sd_listen_fds(3)), the watchdog (watchdog.hpp,
/// sd_watchdog_enabled(3)). Without systemd every function here is a no-op or says so.
/// May include: shared/ headers. Included by daemon/net/, daemon/restart/ and main.cpp.
///
/// This header: messages to $NOTIFY_SOCKET, one datagram each.

#include <chrono>
#include <span>
#include <string_view>
#include <system_error>

namespace gpumem::daemon::systemd {

/// @brief Whether $NOTIFY_SOCKET names a socket this process can send to (a path or an
/// abstract name that fits a Unix socket address).
bool notify_socket_set() noexcept;

/// @brief Sends @p state (e.g. "READY=1", "WATCHDOG=1", several lines joined by '\n').
/// @return false when not sent: no usable $NOTIFY_SOCKET, or the send failed. Notification is
/// advisory, so callers may ignore it.
bool notify(std::string_view state) noexcept;

/// @brief Sends @p state with @p fds attached (SCM_RIGHTS) and this process's credentials
/// (SCM_CREDENTIALS), as sd_pid_notify_with_fds(3) does: e.g. "FDSTORE=1\nFDNAME=pool-0".
/// @p fds stay open here; systemd keeps its own copies.
/// @return std::errc::not_supported without a usable $NOTIFY_SOCKET; EINVAL for more than 253
/// fds (one message carries at most 253: splitting is the caller's job); the send's error.
std::error_code notify_with_fds(std::string_view state, std::span<const int> fds);

/// @brief Waits until systemd has processed every message this process sent before
/// (sd_notify_barrier(3)): sends BARRIER=1 with a pipe's write end and waits for the read end
/// to hang up, which it does once systemd closes its copy.
/// @return std::errc::not_supported without a usable $NOTIFY_SOCKET, std::errc::timed_out
/// after @p timeout, or the error of a failed send.
std::error_code barrier(std::chrono::milliseconds timeout);

}  // namespace gpumem::daemon::systemd
