#include "memory/host_pool.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <new>

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
  auto offset = ranges_.allocate(size);
  if (!offset && !unsettled_.empty()) {
    settle_frees();
    offset = ranges_.allocate(size);
  }
  if (!offset) return std::nullopt;
  return placement{*offset, *ranges_.rounded(size)};
}

void host_pool::do_free(const placement& where, std::uint64_t size) noexcept {
  try {
    unsettled_.push_back({where.offset, where.reserved_bytes, size});
  } catch (const std::bad_alloc&) {
    punch(where.offset, where.reserved_bytes);
    ranges_.free(where.offset, size);
  }
}

void host_pool::settle_frees() noexcept {
  if (unsettled_.empty()) return;
  std::sort(unsettled_.begin(), unsettled_.end(),
            [](const freed_range& a, const freed_range& b) { return a.offset < b.offset; });
  std::uint64_t run_start = unsettled_.front().offset;
  std::uint64_t run_end = run_start;
  for (const freed_range& range : unsettled_) {
    if (range.offset != run_end) {
      punch(run_start, run_end - run_start);
      run_start = range.offset;
    }
    run_end = range.offset + range.reserved_bytes;
  }
  punch(run_start, run_end - run_start);
  // Placeable only now: a range placed before its punch would lose its new holder's bytes.
  for (const freed_range& range : unsettled_) ranges_.free(range.offset, range.size);
  unsettled_.clear();
}

void host_pool::punch(std::uint64_t offset, std::uint64_t length) const noexcept {
  ::fallocate(memfd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
              static_cast<off_t>(length));
}

}  // namespace gpumem::daemon
