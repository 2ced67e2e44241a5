#pragma once
/// @file
/// @brief Who is on the other end of a Unix socket, and a descriptor that becomes readable
/// when that process has exited.

#include "gpumem/shared/unique_fd.hpp"
#include "ledger/ledger.hpp"

namespace gpumem::daemon {

/// @brief SO_PEERCRED of a connected socket. A pid of 0 means the peer lives in a PID
/// namespace the daemon cannot see.
credentials peer_credentials(int socket);

/// @brief A pidfd of the peer: SO_PEERPIDFD where the kernel has it (no PID-reuse race), else
/// pidfd_open of the SO_PEERCRED pid. Empty when neither works (the peer's PID is not visible
/// here, or an old kernel); then the socket closing is the only sign of its end.
unique_fd peer_pidfd(int socket, const credentials& who);

}  // namespace gpumem::daemon
