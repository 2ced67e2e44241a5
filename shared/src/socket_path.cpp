#include "gpumem/shared/socket_path.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

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
  std::string path = default_daemon_socket_path();
  if (non_empty_env(kSocketEnv) == nullptr && !is_socket(path) && is_socket(kSystemSocketPath)) {
    return kSystemSocketPath;
  }
  return path;
}

}  // namespace gpumem
