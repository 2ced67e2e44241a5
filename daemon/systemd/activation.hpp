#pragma once
/// @file
/// @brief The descriptors systemd passes at start (sd_listen_fds(3)): the sockets of the
/// socket unit and the fd store's contents, from fd 3 on, described by $LISTEN_PID,
/// $LISTEN_FDS and $LISTEN_FDNAMES.

#include <string>
#include <vector>

#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::daemon::systemd {

struct passed_fd {
  std::string name;  ///< FileDescriptorName= of the socket, FDNAME= of a stored fd, or "unknown"
  unique_fd fd;
};

/// @brief Takes the descriptors passed to this process, in the order passed.
///
/// Only when $LISTEN_PID is this process (else they were meant for another, and nothing is
/// taken). Names come from $LISTEN_FDNAMES, split at ':'; a missing or empty name is
/// "unknown", as systemd says. Each fd is made close-on-exec.
/// @post $LISTEN_PID, $LISTEN_FDS and $LISTEN_FDNAMES are unset, so that they are taken once.
/// @return empty when none were passed, or when a variable is malformed or names an fd that
/// is not open (a warning in the log says which).
std::vector<passed_fd> take_passed_fds();

}  // namespace gpumem::daemon::systemd
