#include "gpumem/shared/os/memfd.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace gpumem::os {

unique_fd make_empty_memfd(const std::string& name) {
  unique_fd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) throw std::system_error(errno, std::system_category(), "memfd_create " + name);
  // Mode 0600: a process of another uid given a read-only descriptor cannot open it again
  // read-write through /proc/self/fd (memfds start as 0777, and that reopening checks the mode).
  if (::fchmod(fd.get(), 0600) != 0) {
    throw std::system_error(errno, std::system_category(), "fchmod of memfd " + name);
  }
  return fd;
}

unique_fd make_memfd(const std::string& name, std::size_t size) {
  unique_fd fd = make_empty_memfd(name);
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    throw std::system_error(errno, std::system_category(), "sizing memfd " + name);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    throw std::system_error(errno, std::system_category(), "sealing memfd " + name);
  }
  return fd;
}

int punch_hole(int fd, std::uint64_t offset, std::uint64_t length) noexcept {
  const int status = ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                 static_cast<off_t>(offset), static_cast<off_t>(length));
  return status == 0 ? 0 : errno;
}

unique_fd make_sealed_memfd(const std::string& name, std::size_t size) {
  unique_fd fd = make_memfd(name, size);
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SEAL) != 0) {
    throw std::system_error(errno, std::system_category(), "sealing memfd " + name);
  }
  return fd;
}

unique_fd reopen_read_only(int memfd) {
  const std::string path = "/proc/self/fd/" + std::to_string(memfd);
  unique_fd reopened(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!reopened) throw std::system_error(errno, std::system_category(), "reopening " + path);
  return reopened;
}

std::uint64_t file_size(int fd) {
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    throw std::system_error(errno, std::system_category(), "fstat of a memfd");
  }
  return static_cast<std::uint64_t>(status.st_size);
}

}  // namespace gpumem::os
