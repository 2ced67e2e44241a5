#pragma once
/// @file
/// @brief Move-only owner of a shared memory mapping (mmap with MAP_SHARED), unmapped with
/// munmap when destroyed.

#include <cstddef>
#include <cstdint>
#include <system_error>
#include <utility>

namespace gpumem::os {

enum class access { read_only, read_write };

class mapping {
 public:
  mapping() noexcept = default;
  /// @brief Takes over a mapping the caller made.
  mapping(void* start, std::size_t size) noexcept : start_(start), size_(size) {}
  mapping(mapping&& other) noexcept
      : start_(std::exchange(other.start_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  mapping& operator=(mapping&& other) noexcept {
    if (this != &other) {
      reset();
      start_ = std::exchange(other.start_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() { reset(); }

  /// @brief Maps @p size bytes of @p fd from @p offset (a multiple of the page size), shared
  /// with every other mapping of the file. On failure @p error says why and the result is
  /// empty.
  static mapping share(int fd, std::size_t size, access rights, std::uint64_t offset,
                       std::error_code& error) noexcept;
  /// @throws std::system_error ("mmap") where the overload above reports an error.
  static mapping share(int fd, std::size_t size, access rights, std::uint64_t offset = 0);

  void* get() const noexcept { return start_; }
  std::size_t size() const noexcept { return size_; }
  explicit operator bool() const noexcept { return start_ != nullptr; }

  /// @brief Gives up ownership without unmapping: the caller unmaps what is returned.
  void* release() noexcept {
    size_ = 0;
    return std::exchange(start_, nullptr);
  }
  /// @brief Unmaps now; afterwards the owner is empty.
  void reset() noexcept;

 private:
  void* start_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace gpumem::os
