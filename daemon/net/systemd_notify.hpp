#pragma once
/// @file
/// @brief sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET.

#include <string_view>

namespace gpumem::daemon {

/// @brief Sends @p state (e.g. "READY=1") when started by systemd with Type=notify; a no-op
/// otherwise. Failures are ignored: notification is advisory.
void notify_systemd(std::string_view state) noexcept;

}  // namespace gpumem::daemon
