#pragma once
// Reading what a process sends to systemd's notification socket (sd_notify(3)): the text, the
// fds it carried and the sender, for the tests' stand-ins for systemd.

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::testing {

/// One datagram of a notification socket.
struct notification {
  std::string text;
  std::vector<unique_fd> fds;
  pid_t sender = 0;  ///< from SCM_CREDENTIALS (SO_PASSCRED on the socket)
};

/// @brief Reads one datagram that poll() found waiting on @p socket, without blocking. nullopt
/// where none could be read, or it did not fit (as systemd, which drops such a message with the
/// fds that came with it).
inline std::optional<notification> read_notification(int socket) {
  // systemd reads notifications into a buffer of this size (NOTIFY_BUFFER_MAX), and a message
  // carries at most SCM_MAX_FD fds.
  constexpr std::size_t kTextBytes = 4096;
  constexpr std::size_t kMostFds = 253;
  std::vector<char> buffer(kTextBytes);
  std::vector<cmsghdr> control(
      (CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * kMostFds) + sizeof(cmsghdr)) /
      sizeof(cmsghdr));
  iovec data{buffer.data(), buffer.size()};
  msghdr header{};
  header.msg_iov = &data;
  header.msg_iovlen = 1;
  header.msg_control = control.data();
  header.msg_controllen = control.size() * sizeof(cmsghdr);
  const ssize_t size = ::recvmsg(socket, &header, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (size < 0) return std::nullopt;
  notification got;
  for (cmsghdr* each = CMSG_FIRSTHDR(&header); each != nullptr; each = CMSG_NXTHDR(&header, each)) {
    if (each->cmsg_level != SOL_SOCKET) continue;
    if (each->cmsg_type == SCM_RIGHTS) {
      for (std::size_t i = 0; i < (each->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(each) + i * sizeof(int), sizeof fd);
        got.fds.emplace_back(fd);
      }
    } else if (each->cmsg_type == SCM_CREDENTIALS) {
      ucred credentials{};
      std::memcpy(&credentials, CMSG_DATA(each), sizeof credentials);
      got.sender = credentials.pid;
    }
  }
  if ((header.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) return std::nullopt;
  got.text.assign(buffer.data(), static_cast<std::size_t>(size));
  return got;
}

}  // namespace gpumem::testing
