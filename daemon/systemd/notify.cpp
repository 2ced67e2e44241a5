#include "systemd/notify.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::daemon::systemd {

namespace {
/// The most descriptors one message may carry (SCM_MAX_FD in the kernel).
constexpr std::size_t kMaxFdsPerMessage = 253;

struct notify_address {
  sockaddr_un address{};
  socklen_t size = 0;
};

std::optional<notify_address> notify_socket_address() noexcept {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || (path[0] != '/' && path[0] != '@')) return std::nullopt;
  notify_address result;
  result.address.sun_family = AF_UNIX;
  const std::size_t length = std::strlen(path);
  if (length < 2 || length >= sizeof result.address.sun_path) return std::nullopt;
  std::memcpy(result.address.sun_path, path, length);
  if (result.address.sun_path[0] == '@') result.address.sun_path[0] = '\0';  // abstract name
  result.size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length);
  return result;
}

/// One datagram with @p fds and, when @p with_credentials, this process's credentials.
std::error_code send_datagram(int socket, const notify_address& to, std::string_view state,
                              std::span<const int> fds, bool with_credentials) noexcept {
  iovec data{const_cast<char*>(state.data()), state.size()};
  msghdr message{};
  message.msg_name = const_cast<sockaddr_un*>(&to.address);
  message.msg_namelen = to.size;
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  const std::size_t rights_size = fds.empty() ? 0 : CMSG_SPACE(sizeof(int) * fds.size());
  const std::size_t credentials_size = with_credentials ? CMSG_SPACE(sizeof(ucred)) : 0;
  union {
    cmsghdr alignment;
    char bytes[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage) + CMSG_SPACE(sizeof(ucred))];
  } control{};
  if (rights_size + credentials_size > 0) {
    message.msg_control = control.bytes;
    message.msg_controllen = rights_size + credentials_size;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    if (!fds.empty()) {
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
      header = CMSG_NXTHDR(&message, header);
    }
    if (with_credentials) {
      const ucred self{::getpid(), ::getuid(), ::getgid()};
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_CREDENTIALS;
      header->cmsg_len = CMSG_LEN(sizeof self);
      std::memcpy(CMSG_DATA(header), &self, sizeof self);
    }
  }
  for (;;) {
    if (::sendmsg(socket, &message, MSG_NOSIGNAL) >= 0) return {};
    if (errno != EINTR) return {errno, std::generic_category()};
  }
}

std::error_code send_notification(std::string_view state, std::span<const int> fds) noexcept {
  const auto to = notify_socket_address();
  if (!to) return std::make_error_code(std::errc::not_supported);
  if (fds.size() > kMaxFdsPerMessage) return std::make_error_code(std::errc::invalid_argument);
  unique_fd socket(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!socket) return {errno, std::generic_category()};
  const std::error_code error = send_datagram(socket.get(), *to, state, fds, true);
  // Credentials of our own pid, uid and gid are always allowed, except where a user
  // namespace maps them oddly: like libsystemd, send without them then (systemd still learns
  // the sender from the kernel, SO_PASSCRED).
  if (error == std::errc::operation_not_permitted) {
    return send_datagram(socket.get(), *to, state, fds, false);
  }
  return error;
}
}  // namespace

bool notify_socket_set() noexcept {
  return notify_socket_address().has_value();
}

bool notify(std::string_view state) noexcept {
  return !send_notification(state, {});
}

std::error_code notify_with_fds(std::string_view state, std::span<const int> fds) {
  return send_notification(state, fds);
}

std::error_code barrier(std::chrono::milliseconds timeout) {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return {errno, std::generic_category()};
  unique_fd read_end(ends[0]);
  unique_fd write_end(ends[1]);
  const int passed[] = {write_end.get()};
  if (const std::error_code error = send_notification("BARRIER=1", passed)) return error;
  write_end.reset();  // systemd's copy is the last one now
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::make_error_code(std::errc::timed_out);
    pollfd hang_up{read_end.get(), 0, 0};  // POLLHUP is always reported
    const int ready = ::poll(&hang_up, 1, static_cast<int>(left.count()));
    if (ready > 0 && (hang_up.revents & POLLHUP) != 0) return {};
    if (ready < 0 && errno != EINTR) return {errno, std::generic_category()};
  }
}

}  // namespace gpumem::daemon::systemd
