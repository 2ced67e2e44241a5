#include "gpumem/shared/fd_passing.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "gpumem/proto/wire.hpp"

namespace gpumem {

namespace {
// Room for the most descriptors the protocol ever sends in one message, plus slack so that a
// peer sending a few too many is seen as "too many" rather than as a truncated message.
constexpr std::size_t kControlSpace = CMSG_SPACE(sizeof(int) * (proto::kMaxFdsPerMessage + 8));

void close_all(const cmsghdr* first, msghdr& message) noexcept {
  for (const cmsghdr* c = first; c != nullptr; c = CMSG_NXTHDR(&message, const_cast<cmsghdr*>(c))) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      ::close(fd);
    }
  }
}
}  // namespace

std::size_t send_with_fds(int socket, std::span<const std::byte> bytes, std::span<const int> fds,
                          std::error_code& error) noexcept {
  error.clear();
  if (fds.size() > proto::kMaxFdsPerMessage) {
    error = std::make_error_code(std::errc::invalid_argument);
    return 0;
  }
  iovec io{const_cast<std::byte*>(bytes.data()), bytes.size()};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  alignas(cmsghdr) std::byte control[CMSG_SPACE(sizeof(int) * proto::kMaxFdsPerMessage)];
  attach_fds(message, control, fds);
  for (;;) {
    const ssize_t sent = ::sendmsg(socket, &message, MSG_NOSIGNAL);
    if (sent >= 0) return static_cast<std::size_t>(sent);
    if (errno == EINTR) continue;
    error = {errno, std::system_category()};
    return 0;
  }
}

std::size_t recv_with_fds(int socket, std::span<std::byte> buffer, std::vector<unique_fd>& fds,
                          std::error_code& error) noexcept {
  error.clear();
  iovec io{buffer.data(), buffer.size()};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[kControlSpace];
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  ssize_t received;
  do {
    received = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  } while (received < 0 && errno == EINTR);
  if (received < 0) {
    error = {errno, std::system_category()};
    return 0;
  }
  take_fds(message, fds, error);
  return error ? 0 : static_cast<std::size_t>(received);
}

std::size_t fd_control_size(std::size_t count) noexcept {
  return CMSG_SPACE(sizeof(int) * count);
}

std::size_t fd_receive_control_size() noexcept {
  return kControlSpace;
}

void attach_fds(msghdr& message, std::span<std::byte> control, std::span<const int> fds) noexcept {
  if (fds.empty()) return;
  message.msg_control = control.data();
  message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  cmsghdr* c = CMSG_FIRSTHDR(&message);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
}

void take_fds(msghdr& message, std::vector<unique_fd>& fds, std::error_code& error) noexcept {
  if (message.msg_flags & MSG_CTRUNC) {
    close_all(CMSG_FIRSTHDR(&message), message);
    error = std::make_error_code(std::errc::protocol_error);
    return;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
}

}  // namespace gpumem
