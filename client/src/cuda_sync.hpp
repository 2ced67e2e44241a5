#pragma once
/// @file
/// @brief The CUDA calls behind stream-ordered and device locks, barriers and channels:
/// mapping a device's signal page, registering the host page, and stream memory operations.
/// Built without CUDA, each throws Error(not_supported).

#include <cstddef>
#include <cstdint>
#include <memory>

#include "gpumem/gpumem.hpp"

namespace gpumem::detail::cuda_sync {

/// @brief Memory this process made visible to devices (a mapped signal page, the registered
/// host page): its device address while it lives. Destroying it undoes the mapping or the
/// registration.
class device_mapping {
 public:
  struct owners;  ///< the CUDA handles behind it (cuda_sync.cpp)

  device_mapping() noexcept;
  device_mapping(std::uint64_t address, std::unique_ptr<owners> held) noexcept;
  device_mapping(device_mapping&&) noexcept;
  device_mapping& operator=(device_mapping&&) noexcept;
  ~device_mapping();

  std::uint64_t address() const noexcept { return address_; }
  explicit operator bool() const noexcept { return address_ != 0; }

 private:
  std::uint64_t address_ = 0;
  std::unique_ptr<owners> owners_;
};

/// @brief Maps the signal page exported as @p fd (closed by the caller) for @p device; the
/// address is valid in every context of the process.
device_mapping map_signal_page(int fd, int device, std::size_t size);

/// @brief Lets streams write to the host page (a stream-ordered release clears its queue
/// entry there). The page must outlive the result.
device_mapping register_host_page(void* page, std::size_t size);

/// The device a stream's work runs on (the current context's for the default stream).
int device_of(Stream stream);

enum class wait_kind { equal, at_least };
void wait_value(Stream stream, std::uint64_t address, std::uint32_t value, wait_kind kind);
void write_value(Stream stream, std::uint64_t address, std::uint32_t value);

}  // namespace gpumem::detail::cuda_sync
