#include "memory/host_pool.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "gpumem/shared/os/memfd.hpp"

namespace gpumem::daemon {

namespace {
std::uint64_t page_size() {
  return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}
}  // namespace

host_pool::host_pool(std::uint32_t id, pool_config config)
    : pool(id, std::move(config)),
      memfd_(os::make_sealed_memfd("gpumemd:" + this->config().name, this->config().size)),
      read_only_(os::reopen_read_only(memfd_.get())),
      ranges_(this->config().size, page_size()) {}

host_pool::host_pool(std::uint32_t id, pool_config config, unique_fd memfd)
    : pool(id, std::move(config)),
      memfd_(std::move(memfd)),
      read_only_(os::reopen_read_only(memfd_.get())),
      ranges_(os::file_size(memfd_.get()), page_size()) {}

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
