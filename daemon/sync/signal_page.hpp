#pragma once
/// @file
/// @brief A device's signal page as the daemon holds it: the device memory whose words
/// stream-ordered locks, GPU barriers and kernels wait on, exported to every client once. The
/// daemon touches it only to clean up after a client died.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace gpumem::daemon {

class signal_page {
 public:
  signal_page() = default;
  signal_page(const signal_page&) = delete;
  signal_page& operator=(const signal_page&) = delete;
  virtual ~signal_page() = default;

  virtual int fd() const noexcept = 0;  ///< the chunk's shareable handle, owned by the page
  virtual std::uint64_t size() const noexcept = 0;
  /// @brief The 32-bit word at @p offset in @p cell, as the GPU last wrote it.
  virtual std::uint32_t read(std::uint32_t cell, std::size_t offset) = 0;
  virtual void write(std::uint32_t cell, std::size_t offset, std::uint32_t value) = 0;
  /// @brief Stream-ordered: once the word equals @p turn, stores @p next_turn (passing on the turn
  /// of a stream-ordered lock that a dead client will never take), without blocking.
  virtual void pass_turn(std::uint32_t cell, std::size_t offset, std::uint32_t turn,
                         std::uint32_t next_turn) = 0;
  /// @brief Zeroes a cell for its next object.
  virtual void clear(std::uint32_t cell) = 0;
};

/// Makes the signal page of @p device; throws request_error.
using signal_page_maker = std::function<std::unique_ptr<signal_page>(std::int32_t device)>;

}  // namespace gpumem::daemon
