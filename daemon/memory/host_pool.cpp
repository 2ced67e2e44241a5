#include "memory/host_pool.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <system_error>

namespace gpumem::daemon {

namespace {
std::uint64_t page_size() {
  return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

unique_fd make_sealed_memfd(const pool_config& config) {
  unique_fd fd(::memfd_create(("gpumemd:" + config.name).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) throw std::system_error(errno, std::system_category(), "memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(config.size)) != 0) {
    throw std::system_error(errno, std::system_category(), "ftruncate of host pool memfd");
  }
  // A client that shrank the file would make every other mapping of it fault (SIGBUS).
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    throw std::system_error(errno, std::system_category(), "sealing host pool memfd");
  }
  return fd;
}
}  // namespace

host_pool::host_pool(std::uint32_t id, pool_config config)
    : pool(id, std::move(config)),
      memfd_(make_sealed_memfd(this->config())),
      ranges_(this->config().size, page_size()) {}

std::optional<placement> host_pool::do_allocate(std::uint64_t size) {
  const auto offset = ranges_.allocate(size);
  if (!offset) return std::nullopt;
  return placement{*offset, *ranges_.rounded(size)};
}

void host_pool::do_free(const placement& where, std::uint64_t size) noexcept {
  // Dropping the pages both returns them to the system and hands the next tenant zeroes
  // instead of the previous one's data.
  ::fallocate(memfd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
              static_cast<off_t>(where.offset), static_cast<off_t>(where.reserved_bytes));
  ranges_.free(where.offset, size);
}

}  // namespace gpumem::daemon
