#pragma once
/// @file
/// @brief The CUDA calls behind stream-ordered and device locks, barriers and channels:
/// mapping a device's signal page, registering the host page, and stream memory operations.
/// Built without CUDA, each throws Error(not_supported).

#include <cstddef>
#include <cstdint>

#include "gpumem/gpumem.hpp"

namespace gpumem::detail::cuda_sync {

/// @brief Maps the signal page exported as @p fd (closed by the caller) for @p device.
/// @return its address, valid in every context of the process.
std::uint64_t map_signal_page(int fd, int device, std::size_t size);
void unmap_signal_page(std::uint64_t address, std::size_t size) noexcept;

/// @brief Lets streams write to the host page (a stream-ordered release clears its queue
/// entry there). @return the page's device address.
std::uint64_t register_host_page(void* page, std::size_t size);
void unregister_host_page(void* page) noexcept;

/// The device a stream's work runs on (the current context's for the default stream).
int device_of(Stream stream);

enum class wait_kind { equal, at_least };
void wait_value(Stream stream, std::uint64_t address, std::uint32_t value, wait_kind kind);
void write_value(Stream stream, std::uint64_t address, std::uint32_t value);

}  // namespace gpumem::detail::cuda_sync
