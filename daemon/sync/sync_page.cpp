#include "sync/sync_page.hpp"

#include <fmt/format.h>

#include <cstring>

#include "gpumem/shared/os/memfd.hpp"
#include "gpumem/shared/sync/layout.hpp"

namespace gpumem::daemon {

sync_class sync_class::of(uid_t owner, gid_t group, mode_t mode) noexcept {
  const bool group_uses = (mode & 0060) == 0060;
  const bool others_use = (mode & 0006) == 0006;
  // The group matters to others too: like a file, a member of it gets the group's bits only.
  return {owner, group_uses || others_use ? std::optional<gid_t>(group) : std::nullopt, group_uses,
          others_use};
}

object_row sync_class::sample() const {
  object_row row{};
  row.owner_uid = owner;
  row.owner_gid = group.value_or(static_cast<gid_t>(-1));
  row.mode = 0600 | (group_uses ? 0060 : 0) | (others_use ? 0006 : 0);
  return row;
}

std::string sync_class::describe() const {
  if (!group) return fmt::format("uid {}, mode 0600", owner);
  return fmt::format("uid {}, group {}, mode {:04o}", owner, *group, sample().mode);
}

sync_page::sync_page(std::uint32_t id, sync_class tenant)
    : id_(id),
      tenant_(tenant),
      fd_(os::make_sealed_memfd("gpumemd-sync", sync::kHostPageSize)),
      mapping_(os::mapping::share(fd_.get(), sync::kHostPageSize, os::access::read_write)),
      cell_objects_(sync::kCellCount, 0) {}

std::byte* sync_page::cell(std::uint32_t index) const noexcept {
  return static_cast<std::byte*>(mapping_.get()) + std::size_t{index} * sync::kCellSize;
}

std::optional<std::uint32_t> sync_page::take_cell(object_id object) noexcept {
  // Round robin, so that a freed cell is reused as late as possible: a repair queued on a
  // signal page for its old object may still be waiting its turn.
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
