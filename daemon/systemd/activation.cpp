#include "systemd/activation.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <charconv>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace gpumem::daemon::systemd {

namespace {
/// The first passed descriptor (SD_LISTEN_FDS_START).
constexpr int kFirstPassedFd = 3;
constexpr int kMostPassedFds = INT_MAX - kFirstPassedFd;

std::optional<long long> whole_number(std::string_view text) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string> split_names(std::string_view names) {
  std::vector<std::string> result;
  for (;;) {
    const auto colon = names.find(':');
    result.emplace_back(names.substr(0, colon));
    if (colon == std::string_view::npos) return result;
    names.remove_prefix(colon + 1);
  }
}

/// The fds systemd passed, still without close-on-exec; empty when none or malformed.
std::vector<passed_fd> read_passed_fds() {
  const char* listen_pid = std::getenv("LISTEN_PID");
  if (listen_pid == nullptr) return {};
  const auto pid = whole_number(listen_pid);
  if (!pid || *pid <= 0) {
    spdlog::warn("systemd: LISTEN_PID={} is not a process id; ignoring the passed fds", listen_pid);
    return {};
  }
  if (*pid != ::getpid()) return {};  // inherited: meant for a parent, not for us
  const char* listen_fds = std::getenv("LISTEN_FDS");
  const auto count = whole_number(listen_fds == nullptr ? "" : listen_fds);
  if (!count || *count < 0 || *count > kMostPassedFds) {
    spdlog::warn("systemd: LISTEN_FDS={} is not a count of fds; ignoring the passed fds",
                 listen_fds == nullptr ? "(unset)" : listen_fds);
    return {};
  }
  std::vector<std::string> names;
  if (const char* listen_names = std::getenv("LISTEN_FDNAMES")) names = split_names(listen_names);
  if (names.size() > static_cast<std::size_t>(*count)) {
    spdlog::warn(
        "systemd: LISTEN_FDNAMES names {} fds but LISTEN_FDS passes {}; extra names "
        "ignored",
        names.size(), *count);
  }
  std::vector<passed_fd> passed;
  passed.reserve(static_cast<std::size_t>(*count));
  for (int index = 0; index < *count; ++index) {
    const int fd = kFirstPassedFd + index;
    if (::fcntl(fd, F_GETFD) < 0) {
      spdlog::warn("systemd: LISTEN_FDS={} but fd {} is not open; closing the passed fds", *count,
                   fd);
      return {};
    }
    const auto at = static_cast<std::size_t>(index);
    std::string name = at < names.size() && !names[at].empty() ? names[at] : "unknown";
    passed.push_back({std::move(name), unique_fd(fd)});
  }
  return passed;
}
}  // namespace

std::vector<passed_fd> take_passed_fds() {
  std::vector<passed_fd> passed = read_passed_fds();
  for (const auto& each : passed) {
    const int flags = ::fcntl(each.fd.get(), F_GETFD);
    ::fcntl(each.fd.get(), F_SETFD, flags | FD_CLOEXEC);
  }
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  return passed;
}

}  // namespace gpumem::daemon::systemd
