#include "gpumem/shared/os/mapping.hpp"

#include <sys/mman.h>

#include <cerrno>

namespace gpumem::os {

mapping mapping::share(int fd, std::size_t size, access rights, std::uint64_t offset,
                       std::error_code& error) noexcept {
  const int protection = PROT_READ | (rights == access::read_write ? PROT_WRITE : 0);
  void* start = ::mmap(nullptr, size, protection, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (start == MAP_FAILED) {
    error.assign(errno, std::system_category());
    return {};
  }
  error.clear();
  return {start, size};
}

mapping mapping::share(int fd, std::size_t size, access rights, std::uint64_t offset) {
  std::error_code error;
  mapping mapped = share(fd, size, rights, offset, error);
  if (error) throw std::system_error(error, "mmap");
  return mapped;
}

void mapping::reset() noexcept {
  if (start_ != nullptr) ::munmap(start_, size_);
  start_ = nullptr;
  size_ = 0;
}

}  // namespace gpumem::os
