#include "net/peer_process.hpp"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <vector>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5
#endif

namespace gpumem::daemon {

credentials peer_credentials(int socket) {
  ucred cred{};
  socklen_t size = sizeof cred;
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0) {
    throw std::system_error(errno, std::system_category(), "SO_PEERCRED");
  }
  credentials who{cred.pid, cred.uid, cred.gid, {}};
  // Supplementary groups decide group access; a kernel without SO_PEERGROUPS (before 4.13)
  // leaves only the primary group.
  std::vector<gid_t> groups(64);
  for (;;) {
    socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
      groups.resize(bytes / sizeof(gid_t));
      who.groups = std::move(groups);
      break;
    }
    if (errno != ERANGE) break;
    groups.resize(bytes / sizeof(gid_t) + 1);
  }
  return who;
}

unique_fd peer_pidfd(int socket, const credentials& who) {
  int fd = -1;
  socklen_t size = sizeof fd;
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERPIDFD, &fd, &size) == 0 && fd >= 0) {
    return unique_fd(fd);
  }
  if (who.pid <= 0) return {};
  return unique_fd(static_cast<int>(::syscall(SYS_pidfd_open, who.pid, 0)));
}

}  // namespace gpumem::daemon
