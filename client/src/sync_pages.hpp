#pragma once
/// @file
/// @brief One session's view of the lock pages: the host page mapped once (with this
/// client's slot), and, on first use of a device, that device's signal page.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "cuda_sync.hpp"
#include "gpumem/shared/os/mapping.hpp"

namespace gpumem::detail {

class transport;

class sync_pages {
 public:
  /// @brief Asks the daemon for the host page and this client's slot, and maps it.
  explicit sync_pages(transport& link);
  sync_pages(const sync_pages&) = delete;
  sync_pages& operator=(const sync_pages&) = delete;

  std::uint16_t slot() const noexcept { return slot_; }
  std::byte* cell(std::uint32_t index) const noexcept;
  /// @brief The device address of a word in the signal cell @p index of @p device.
  std::uint64_t signal_word(int device, std::uint32_t index, std::size_t offset);
  /// @brief The device address of a word of the host page, for stream memory operations.
  std::uint64_t host_word_on_device(const void* word);

 private:
  transport& link_;
  std::uint16_t slot_ = 0;
  os::mapping page_;
  std::mutex mutex_;
  std::map<int, cuda_sync::device_mapping> signal_pages_;  ///< by device
  cuda_sync::device_mapping page_on_device_;               ///< unregistered before page_ goes
};

}  // namespace gpumem::detail
