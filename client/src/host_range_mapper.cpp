#include "host_range_mapper.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace gpumem::detail {

namespace {
// MAP_NORESERVE: the range is address space only; nothing is committed until a chunk lands.
constexpr int kReservedFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

/// What failed, in the OS's words; @p error is errno as the call left it.
std::string os_error(int error, const std::string& doing) {
  return doing + ": " + std::strerror(error);
}
}  // namespace

host_range_mapper::host_range_mapper(std::size_t max_size, std::size_t chunk_size)
    : chunk_size_(chunk_size) {
  void* start = ::mmap(nullptr, max_size, PROT_NONE, kReservedFlags, -1, 0);
  if (start == MAP_FAILED) {
    const int error = errno;
    throw Error(errc::out_of_memory,
                os_error(error, "reserving " + std::to_string(max_size) + " bytes of addresses"));
  }
  reserved_ = os::mapping(start, max_size);
}

std::byte* host_range_mapper::slot(std::size_t index) const noexcept {
  return static_cast<std::byte*>(reserved_.get()) + index * chunk_size_;
}

void host_range_mapper::map(std::size_t index, int fd, Access access) {
  const int protection = PROT_READ | (access == Access::read_write ? PROT_WRITE : 0);
  if (::mmap(slot(index), chunk_size_, protection, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    const std::string why = os_error(errno, "mapping chunk");
    // A failed MAP_FIXED may already have taken the old mapping down: reserve the slot again.
    unmap(index);
    throw Error(errc::io_error, why + " at index " + std::to_string(index));
  }
}

void host_range_mapper::unmap(std::size_t index) {
  if (::mmap(slot(index), chunk_size_, PROT_NONE, kReservedFlags | MAP_FIXED, -1, 0) ==
      MAP_FAILED) {
    const int error = errno;
    throw Error(errc::io_error, os_error(error, "unmapping chunk " + std::to_string(index)));
  }
}

}  // namespace gpumem::detail
