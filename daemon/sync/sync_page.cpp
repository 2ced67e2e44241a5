#include "sync/sync_page.hpp"

#include <algorithm>
#include <cstring>
#include <system_error>

#include "gpumem/shared/os/memfd.hpp"
#include "gpumem/shared/sync/layout.hpp"

namespace gpumem::daemon {

sync_page::sync_page(std::uint32_t id, access_class tenant)
    : id_(id),
      tenant_(tenant),
      fd_(os::make_sealed_memfd("gpumemd-sync", sync::kHostPageSize)),
      mapping_(os::mapping::share(fd_.get(), sync::kHostPageSize, os::access::read_write)),
      cell_objects_(sync::kCellCount, 0) {}

namespace {
/// A kept page shorter than a page would fault the daemon on its first touch (SIGBUS).
unique_fd whole_page(unique_fd memfd) {
  if (os::file_size(memfd.get()) < sync::kHostPageSize) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "a kept lock page is shorter than a page");
  }
  return memfd;
}
}  // namespace

sync_page::sync_page(std::uint32_t id, access_class tenant, unique_fd memfd)
    : id_(id),
      tenant_(tenant),
      fd_(whole_page(std::move(memfd))),
      mapping_(os::mapping::share(fd_.get(), sync::kHostPageSize, os::access::read_write)),
      cell_objects_(sync::kCellCount, 0) {}

bool sync_page::restore_cell(std::uint32_t index, object_id object) noexcept {
  if (index >= sync::kCellCount || cell_objects_[index] != 0) return false;
  cell_objects_[index] = object;
  ++cells_used_;
  next_cell_ = std::max(next_cell_, index + 1);
  return true;
}

void sync_page::adopt_signal_page(std::int32_t device, std::unique_ptr<signal_page> adopted) {
  signal_pages_.insert_or_assign(device, std::move(adopted));
}

std::byte* sync_page::cell(std::uint32_t index) const noexcept {
  return static_cast<std::byte*>(mapping_.get()) + std::size_t{index} * sync::kCellSize;
}

std::optional<std::uint32_t> sync_page::take_cell(object_id object) noexcept {
  // A class's full pages are passed over in turn: that must not cost a scan of each.
  if (cells_used_ == sync::kCellCount) return std::nullopt;
  // Round robin, so that a freed cell is reused as late as possible: a repair queued on a
  // signal page for its old object may not have landed yet (see cuda_signal_page.hpp).
  for (std::uint32_t tried = 0; tried < sync::kCellCount; ++tried) {
    const std::uint32_t index = (next_cell_ + tried) % sync::kCellCount;
    if (cell_objects_[index] != 0) continue;
    cell_objects_[index] = object;
    next_cell_ = index + 1;
    ++cells_used_;
    std::memset(cell(index), 0, sync::kCellSize);
    return index;
  }
  return std::nullopt;
}

void sync_page::free_cell(std::uint32_t index) noexcept {
  if (index >= sync::kCellCount || cell_objects_[index] == 0) return;
  cell_objects_[index] = 0;
  --cells_used_;
}

object_id sync_page::object_in(std::uint32_t index) const noexcept {
  return index < sync::kCellCount ? cell_objects_[index] : 0;
}

signal_page* sync_page::signal_page_on(std::int32_t device) const noexcept {
  const auto found = signal_pages_.find(device);
  return found == signal_pages_.end() ? nullptr : found->second.get();
}

const signal_page& sync_page::make_signal_page(std::int32_t device, const signal_page_maker& make) {
  if (signal_page* made = signal_page_on(device)) return *made;
  return *signal_pages_.emplace(device, make(device)).first->second;
}

}  // namespace gpumem::daemon
