#include "net/asio_reactor.hpp"

#include <dirent.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>

namespace gpumem::daemon {

namespace {

bool is_epoll_instance(const std::string& fd_name) {
  char target[64] = {};
  const std::string link = "/proc/self/fd/" + fd_name;
  const ssize_t length = ::readlink(link.c_str(), target, sizeof target - 1);
  return length > 0 && std::strcmp(target, "anon_inode:[eventpoll]") == 0;
}

bool watches(const std::string& fd_name, int watched) {
  std::ifstream info("/proc/self/fdinfo/" + fd_name);
  for (std::string line; std::getline(info, line);) {
    int fd = -1;
    if (std::sscanf(line.c_str(), "tfd: %d", &fd) == 1 && fd == watched) return true;
  }
  return false;
}

/// The epoll instance among this process's descriptors that watches @p watched, or -1.
int epoll_watching(int watched) {
  const std::unique_ptr<DIR, int (*)(DIR*)> folder(::opendir("/proc/self/fd"), ::closedir);
  if (!folder) {
    throw std::runtime_error(std::string("finding Asio's reactor: /proc/self/fd: ") +
                             std::strerror(errno));
  }
  while (const dirent* entry = ::readdir(folder.get())) {
    const std::string name = entry->d_name;
    if (name != "." && name != ".." && is_epoll_instance(name) && watches(name, watched)) {
      return std::stoi(name);
    }
  }
  return -1;
}

}  // namespace

int asio_reactor_descriptor(boost::asio::io_context& io) {
  const int probe = ::eventfd(0, EFD_CLOEXEC);
  if (probe < 0) throw std::system_error(errno, std::system_category(), "eventfd");
  // Registering the probe makes the reactor, if none was made yet, and puts the probe in it; the
  // probe leaves it when the descriptor object closes it.
  const boost::asio::posix::stream_descriptor registered(io, probe);
  const int reactor = epoll_watching(probe);
  if (reactor < 0) {
    throw std::runtime_error(
        "finding Asio's reactor: no epoll instance in /proc/self/fdinfo watches the descriptor "
        "just registered with it");
  }
  return reactor;
}

}  // namespace gpumem::daemon
