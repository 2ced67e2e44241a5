#pragma once
/// @file
/// @brief One lock and barrier page as this process maps it: the host page of one access
/// class, and, on first use of a device, that page's signal page there and the host page's
/// registration for stream memory operations.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "cuda_sync.hpp"
#include "gpumem/shared/os/mapping.hpp"

namespace gpumem::detail {

class transport;

class sync_page {
 public:
  /// @brief Maps the page @p id that the daemon sent as @p fd (closed by the caller).
  sync_page(transport& link, std::uint32_t id, int fd);
  sync_page(const sync_page&) = delete;
  sync_page& operator=(const sync_page&) = delete;

  std::uint32_t id() const noexcept { return id_; }
  std::byte* cell(std::uint32_t index) const noexcept;
  /// @brief The device address of a word in the signal cell @p index of @p device.
  std::uint64_t signal_word(int device, std::uint32_t index, std::size_t offset);
  /// @brief The device address of a word of the host page, for stream memory operations.
  std::uint64_t host_word_on_device(const void* word);

 private:
  transport& link_;
  std::uint32_t id_;
  os::mapping page_;
  std::mutex mutex_;
  std::map<int, cuda_sync::device_mapping> signal_pages_;  ///< by device
  cuda_sync::device_mapping page_on_device_;               ///< unregistered before page_ goes
};

}  // namespace gpumem::detail
