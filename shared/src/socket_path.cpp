#include "gpumem/shared/socket_path.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace gpumem {

namespace {
const char* non_empty_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

bool is_socket(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISSOCK(info.st_mode);
}

std::string folder_of(const std::string& path) {
  const auto folder = std::filesystem::path(path).parent_path();
  return folder.empty() ? "." : folder.string();
}

bool uid_of_user(const char* name, uid_t& uid) {
  passwd entry{};
  passwd* found = nullptr;
  char buffer[4096];
  if (::getpwnam_r(name, &entry, buffer, sizeof buffer, &found) != 0 || found == nullptr) {
    return false;
  }
  uid = found->pw_uid;
  return true;
}

std::string describe_uid(uid_t uid) {
  if (uid == 0) return "root";
  std::string text = "uid " + std::to_string(uid);
  passwd entry{};
  passwd* found = nullptr;
  char buffer[4096];
  if (::getpwuid_r(uid, &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr) {
    text += std::string(" (") + found->pw_name + ")";
  }
  return text;
}

std::string octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}
}  // namespace

std::string default_daemon_socket_path() {
  if (const char* path = non_empty_env(kSocketEnv)) return path;
  if (::geteuid() == 0) return kSystemSocketPath;
  if (const char* runtime = non_empty_env("XDG_RUNTIME_DIR")) {
    return std::string(runtime) + "/gpumemd.sock";
  }
  return "/tmp/gpumemd-" + std::to_string(::geteuid()) + "/gpumemd.sock";
}

std::string default_client_socket_path() {
  const std::string path = default_daemon_socket_path();
  return non_empty_env(kSocketEnv) != nullptr ? path : client_socket_among(path, kSystemSocketPath);
}

std::string client_socket_among(const std::string& own, const std::string& system) {
  if (own == system || !is_socket(system)) return own;
  if (!is_socket(own)) return system;
  // A socket at the caller's own path that its client would refuse, as one in a folder
  // /tmp/gpumemd-<uid> that another user made first, must not hide the system daemon's (the
  // tenant audit of 2026-11-29).
  try {
    return untrusted_socket(own, trusted_daemon_uids(-1)).empty() ? own : system;
  } catch (const std::invalid_argument&) {  // $GPUMEM_DAEMON_UID names nobody: connecting says so
    return own;
  }
}

std::string unsafe_socket_folder(const std::string& socket_path, uid_t daemon_uid) {
  const std::string folder = folder_of(socket_path);
  struct stat info {};
  if (::stat(folder.c_str(), &info) != 0) return {};  // creating it or binding will say why
  const std::string elsewhere =
      ", or give gpumemd a socket in a folder of its own (--socket or $GPUMEM_SOCKET)";
  if (info.st_uid != daemon_uid && info.st_uid != 0) {
    const std::string trusted = daemon_uid == 0
                                    ? std::string("root, whose uid gpumemd runs as")
                                    : "gpumemd's " + describe_uid(daemon_uid) + " or root";
    return "socket folder " + folder + " belongs to " + describe_uid(info.st_uid) + ", not to " +
           trusted +
           ": whoever owns it can replace the socket and pose as gpumemd. Remove it "
           "(its owner or root can: rm -r " +
           folder + ")" + elsewhere;
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (info.st_mode & S_ISVTX) == 0) {
    return "socket folder " + folder + " has mode " + octal(info.st_mode) +
           ": others may write to it and replace the socket. Fix it with chmod go-w " + folder +
           elsewhere;
  }
  return {};
}

std::vector<uid_t> trusted_daemon_uids(std::int64_t configured) {
  if (configured >= 0) return {0, static_cast<uid_t>(configured)};
  if (const char* wanted = non_empty_env(kDaemonUidEnv)) {
    const std::string_view text(wanted);
    std::uint32_t number = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (error == std::errc{} && end == text.data() + text.size()) {
      return {0, static_cast<uid_t>(number)};
    }
    uid_t named = 0;
    if (uid_of_user(wanted, named)) return {0, named};
    throw std::invalid_argument(std::string("$") + kDaemonUidEnv + " is '" + wanted +
                                "', neither a uid nor a user name");
  }
  std::vector<uid_t> uids{0};
  if (::geteuid() != 0) uids.push_back(::geteuid());
  if (uid_t service = 0; uid_of_user(kServiceUser, service) && service != 0) {
    uids.push_back(service);
  }
  return uids;
}

std::string describe_uids(std::span<const uid_t> uids) {
  std::string text;
  for (std::size_t i = 0; i < uids.size(); ++i) {
    if (i > 0) text += i + 1 == uids.size() ? " or " : ", ";
    text += describe_uid(uids[i]);
  }
  return text;
}

std::string untrusted_socket(const std::string& path, std::span<const uid_t> trusted) {
  const auto owner_problem = [&](const std::string& what, const std::string& where) {
    struct stat info {};
    if (::stat(where.c_str(), &info) != 0) return std::string();
    if (std::ranges::find(trusted, info.st_uid) != trusted.end()) return std::string();
    return "refusing the gpumemd socket " + path + ": its " + what + " belongs to " +
           describe_uid(info.st_uid) + ", and gpumemd's must belong to " + describe_uids(trusted) +
           " (set $" + kDaemonUidEnv +
           " or the daemon_uid connect option when gpumemd runs as another user)";
  };
  std::string problem = owner_problem("folder " + folder_of(path), folder_of(path));
  return problem.empty() ? owner_problem("file", path) : problem;
}

}  // namespace gpumem
