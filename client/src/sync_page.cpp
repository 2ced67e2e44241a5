#include "sync_page.hpp"

#include <vector>

#include "gpumem/shared/sync/layout.hpp"
#include "transport.hpp"

namespace gpumem::detail {

using proto::message_type;

sync_page::sync_page(transport& link, std::uint32_t id, int fd) : link_(link), id_(id) {
  std::error_code error;
  page_ = os::mapping::share(fd, sync::kHostPageSize, os::access::read_write, 0, error);
  if (error) throw Error(errc::io_error, "mapping the lock page: " + error.message());
}

std::byte* sync_page::cell(std::uint32_t index) const noexcept {
  return static_cast<std::byte*>(page_.get()) + std::size_t{index} * sync::kCellSize;
}

std::uint64_t sync_page::signal_word(int device, std::uint32_t index, std::size_t offset) {
  std::lock_guard lock(mutex_);
  auto found = signal_pages_.find(device);
  if (found == signal_pages_.end()) {
    std::vector<unique_fd> fds;
    const auto reply = link_.call<proto::signal_page_reply>(
        message_type::get_signal_page, proto::signal_page_request{device, id_}, &fds);
    if (fds.size() != 1 || reply.cell_size != sync::kSignalCellSize) {
      throw Error(errc::bad_message, "gpumemd's signal page does not match this libgpumem");
    }
    found = signal_pages_
                .emplace(device, cuda_sync::map_signal_page(fds.front().get(), device, reply.size))
                .first;
  }
  return found->second.address() + std::size_t{index} * sync::kSignalCellSize + offset;
}

std::uint64_t sync_page::host_word_on_device(const void* word) {
  std::lock_guard lock(mutex_);
  if (!page_on_device_) {
    page_on_device_ = cuda_sync::register_host_page(page_.get(), page_.size());
  }
  return page_on_device_.address() +
         static_cast<std::uint64_t>(static_cast<const std::byte*>(word) -
                                    static_cast<const std::byte*>(page_.get()));
}

}  // namespace gpumem::detail
