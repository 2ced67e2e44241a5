#include "net/asio_reactor.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::daemon {

namespace {

std::string link_target(const std::string& fd_name) {
  char target[64] = {};
  const std::string link = "/proc/self/fd/" + fd_name;
  const ssize_t length = ::readlink(link.c_str(), target, sizeof target - 1);
  return length > 0 ? std::string(target, static_cast<std::size_t>(length)) : std::string();
}

/// What an epoll instance watches, by its fdinfo: each descriptor's number and inode.
struct watched_file {
  int fd;
  unsigned long inode;
};
std::vector<watched_file> watched_by(const std::string& fd_name) {
  std::vector<watched_file> watched;
  std::ifstream info("/proc/self/fdinfo/" + fd_name);
  for (std::string line; std::getline(info, line);) {
    int fd = -1;
    const char* inode = std::strstr(line.c_str(), " ino:");
    if (std::sscanf(line.c_str(), "tfd: %d", &fd) == 1 && inode != nullptr) {
      watched.push_back({fd, std::strtoul(inode + 5, nullptr, 16)});
    }
  }
  return watched;
}

/// The epoll instances among this process's descriptors that watch @p probe, the descriptor
/// numbered @p fd with inode @p inode (an epoll instance inherited from whoever started the
/// daemon may list the same number for another file of another process: the inode tells them
/// apart), and whether each also watches a timerfd.
struct found_reactor {
  int fd;
  bool has_timer;
};
std::vector<found_reactor> epolls_watching(int fd, unsigned long inode) {
  const std::unique_ptr<DIR, int (*)(DIR*)> folder(::opendir("/proc/self/fd"), ::closedir);
  if (!folder) {
    throw std::runtime_error(std::string("finding Asio's reactor: /proc/self/fd: ") +
                             std::strerror(errno));
  }
  std::vector<found_reactor> found;
  while (const dirent* entry = ::readdir(folder.get())) {
    const std::string name = entry->d_name;
    if (name == "." || name == ".." || link_target(name) != "anon_inode:[eventpoll]") continue;
    const auto watched = watched_by(name);
    bool probe = false;
    bool timer = false;
    for (const watched_file& each : watched) {
      probe = probe || (each.fd == fd && each.inode == inode);
      timer = timer || link_target(std::to_string(each.fd)) == "anon_inode:[timerfd]";
    }
    if (probe) found.push_back({std::stoi(name), timer});
  }
  return found;
}

}  // namespace

int asio_reactor_descriptor(boost::asio::io_context& io) {
  // A pipe's end, not an eventfd: every eventfd has the same inode, a pipe its own.
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::system_category(), "finding Asio's reactor: pipe2");
  }
  unique_fd probe(ends[0]);
  const unique_fd other_end(ends[1]);
  struct stat status {};
  if (::fstat(probe.get(), &status) != 0) {
    throw std::system_error(errno, std::system_category(), "finding Asio's reactor: fstat");
  }
  // Registering the probe makes the reactor, if none was made yet, and puts the probe in it; the
  // probe leaves it when the descriptor object closes it.
  boost::asio::posix::stream_descriptor registered(io);
  boost::system::error_code error;
  registered.assign(probe.get(), error);
  if (error) {
    throw std::runtime_error("finding Asio's reactor: registering a descriptor: " +
                             error.message());
  }
  const int probe_fd = probe.release();  // registered owns it now
  const auto found = epolls_watching(probe_fd, static_cast<unsigned long>(status.st_ino));
  if (found.size() != 1) {
    throw std::runtime_error("finding Asio's reactor: " + std::to_string(found.size()) +
                             " epoll instances in /proc/self/fdinfo watch the descriptor just "
                             "registered with it, where one should");
  }
  if (!found.front().has_timer) {
    // Without its timerfd, Asio works out its timers' deadlines only inside run(): this loop,
    // which waits elsewhere, would never see one come.
    throw std::runtime_error(
        "finding Asio's reactor: it watches no timerfd (Asio could not make one)");
  }
  return found.front().fd;
}

}  // namespace gpumem::daemon
