#include "sync_pages.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "connection.hpp"
#include "cuda_sync.hpp"
#include "gpumem/shared/sync/layout.hpp"

namespace gpumem::detail {

using proto::message_type;

sync_pages::sync_pages(connection& link) : link_(link) {
  std::vector<unique_fd> fds;
  const auto reply =
      link_.call<proto::sync_attach_reply>(message_type::attach_sync, proto::empty_payload{}, &fds);
  if (fds.size() != 1 || reply.cell_size != sync::kCellSize ||
      reply.cell_count != sync::kCellCount) {
    throw Error(errc::bad_message, "gpumemd's lock page does not match this libgpumem");
  }
  page_size_ = std::size_t{reply.cell_size} * reply.cell_count;
  void* mapped =
      ::mmap(nullptr, page_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fds.front().get(), 0);
  if (mapped == MAP_FAILED) {
    throw Error(errc::io_error, std::string("mapping the lock page: ") + std::strerror(errno));
  }
  page_ = static_cast<std::byte*>(mapped);
  slot_ = static_cast<std::uint16_t>(reply.slot);
}

sync_pages::~sync_pages() {
  for (const auto& [device, address] : signal_pages_) {
    cuda_sync::unmap_signal_page(address, signal_page_size_);
  }
  if (page_on_device_ != 0) cuda_sync::unregister_host_page(page_);
  ::munmap(page_, page_size_);
}

std::byte* sync_pages::cell(std::uint32_t index) const noexcept {
  return page_ + std::size_t{index} * sync::kCellSize;
}

std::uint64_t sync_pages::signal_word(int device, std::uint32_t index, std::size_t offset) {
  std::lock_guard lock(mutex_);
  auto found = signal_pages_.find(device);
  if (found == signal_pages_.end()) {
    std::vector<unique_fd> fds;
    const auto reply = link_.call<proto::signal_page_reply>(
        message_type::get_signal_page, proto::signal_page_request{device, 0}, &fds);
    if (fds.size() != 1 || reply.cell_size != sync::kSignalCellSize) {
      throw Error(errc::bad_message, "gpumemd's signal page does not match this libgpumem");
    }
    signal_page_size_ = reply.size;
    const std::uint64_t address =
        cuda_sync::map_signal_page(fds.front().get(), device, signal_page_size_);
    found = signal_pages_.emplace(device, address).first;
  }
  return found->second + std::size_t{index} * sync::kSignalCellSize + offset;
}

std::uint64_t sync_pages::host_word_on_device(const void* word) {
  std::lock_guard lock(mutex_);
  if (page_on_device_ == 0) page_on_device_ = cuda_sync::register_host_page(page_, page_size_);
  return page_on_device_ + static_cast<std::uint64_t>(static_cast<const std::byte*>(word) - page_);
}

}  // namespace gpumem::detail
