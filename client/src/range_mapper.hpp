#pragma once
/// @file
/// @brief A reservation's address range in this process: reserved once, at an address that
/// never moves, with the daemon's chunks mapped into it and unmapped from it at fixed offsets.
/// This is all that differs between the host backend (host_range_mapper: memfds mapped over a
/// PROT_NONE range) and CUDA (cuda_range_mapper: VMM chunks in a cuMemAddressReserve range);
/// what to map, versions, sleep and wake are written once, above it (reservation.cpp).

#include <cstddef>
#include <memory>

#include "gpumem/gpumem.hpp"

namespace gpumem::detail {

class range_mapper {
 public:
  range_mapper() = default;
  range_mapper(const range_mapper&) = delete;
  range_mapper& operator=(const range_mapper&) = delete;
  /// Unmaps every chunk and gives the range back.
  virtual ~range_mapper() = default;

  /// Start of the range: a host pointer, or a device pointer.
  virtual void* base() const noexcept = 0;
  /// @brief Maps the chunk @p fd (the daemon's descriptor, still the caller's to close) at
  /// chunk @p index, writable only with Access::read_write. The index must be unmapped.
  /// @throws Error(io_error) on the host, CudaError on a GPU; the index stays unmapped then.
  virtual void map(std::size_t index, int fd, Access access) = 0;
  /// @brief Unmaps the chunk at @p index (mapped or not); the range stays reserved.
  /// @throws Error(io_error) when the host cannot put the reservation back.
  virtual void unmap(std::size_t index) = 0;
};

/// @brief Fails before anything is asked of the daemon when this process cannot map chunks of
/// @p device: Error(not_supported) for a CUDA device without CUDA here.
void require_backend(int device);

/// @brief Reserves @p max_size bytes for chunks of @p chunk_size bytes of @p device (kHost or a
/// CUDA device).
/// @throws Error(not_supported) as require_backend; Error(out_of_memory) when the host has no
/// room for the range; CudaError when the driver refuses.
std::unique_ptr<range_mapper> reserve_range(int device, std::size_t max_size,
                                            std::size_t chunk_size);

}  // namespace gpumem::detail
