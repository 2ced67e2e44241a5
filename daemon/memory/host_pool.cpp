#include "memory/host_pool.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <system_error>
#include <utility>

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

void host_pool::keep_room_to_free() {
  // Every placed range may be freed before the next settle: room for all of them, grown
  // geometrically (16 bytes a range).
  const std::size_t needed = placed_ + unsettled_.size() + 1;
  if (unsettled_.capacity() < needed) {
    unsettled_.reserve(std::max(needed, 2 * unsettled_.capacity()));
  }
}

std::optional<placement> host_pool::do_allocate(std::uint64_t size) {
  keep_room_to_free();
  auto offset = ranges_.allocate(size);
  if (!offset && !unsettled_.empty()) {
    settle_frees();
    offset = ranges_.allocate(size);
  }
  if (!offset) return std::nullopt;
  ++placed_;
  return placement{*offset, *ranges_.rounded(size)};
}

bool host_pool::do_adopt(const placement& where, std::uint64_t size, const grant_details&) {
  keep_room_to_free();
  if (!ranges_.take(where.offset, size)) return false;
  ++placed_;
  return true;
}

void host_pool::do_free(const placement& where, std::uint64_t size) noexcept {
  --placed_;
  unsettled_.push_back({where.offset, size});  // room kept when it was placed
}

void host_pool::settle_frees() noexcept {
  if (unsettled_.empty()) return;
  std::sort(unsettled_.begin(), unsettled_.end(),
            [](const freed_range& a, const freed_range& b) { return a.offset < b.offset; });
  // One punch per run of neighbouring ranges; the run's ranges are placeable only once it is
  // punched: placed before, a range would hand its last holder's bytes to the next.
  std::size_t kept = 0;  // ranges left for the next turn, moved to the front
  std::size_t run_first = 0;
  for (std::size_t next = 1; next <= unsettled_.size(); ++next) {
    const freed_range& last = unsettled_[next - 1];
    const std::uint64_t run_end = last.offset + *ranges_.rounded(last.size);
    if (next < unsettled_.size() && unsettled_[next].offset == run_end) continue;
    const std::uint64_t run_start = unsettled_[run_first].offset;
    if (punch(run_start, run_end - run_start)) {
      for (std::size_t i = run_first; i < next; ++i) {
        // The allocator needs memory to take back a range with no free neighbour, and then
        // changes nothing when it has none: the range waits for the next turn (its room in
        // unsettled_ is kept) and is punched again then, where nothing is left to punch.
        try {
          ranges_.free(unsettled_[i].offset, unsettled_[i].size);
        } catch (const std::bad_alloc&) {
          unsettled_[kept++] = unsettled_[i];
        }
      }
    } else {
      count_withheld(run_end - run_start);
    }
    run_first = next;
  }
  unsettled_.resize(kept);
}

void host_pool::zero_free_space() {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> refused;
  ranges_.for_each_free_block([&](std::uint64_t offset, std::uint64_t size) {
    if (!punch(offset, size)) refused.emplace_back(offset, size);
  });
  for (const auto& [offset, size] : refused) {
    ranges_.take(offset, size);  // a whole free block: cannot fail
    count_withheld(size);
  }
}

bool host_pool::punch(std::uint64_t offset, std::uint64_t length) noexcept {
  const int error = os::punch_hole(memfd_.get(), offset, length);
  if (error == 0) return true;
  try {
    refusals_.log(spdlog::level::err,
                  "host pool '{}': punching bytes [{}, {}) out of its memfd failed ({}); they "
                  "still hold what their last holder wrote, so this gpumemd places them no more "
                  "(they count in the pool's reserved bytes)",
                  config().name, offset, offset + length, std::system_category().message(error));
  } catch (...) {
    // A log line that cannot be made must not turn a refused punch into a crash.
  }
  return false;
}

}  // namespace gpumem::daemon
