#pragma once
/// @file
/// @brief A CUDA reservation's range: device addresses reserved with cuMemAddressReserve in the
/// device's primary context, each chunk's POSIX fd imported, mapped at its slot with cuMemMap
/// and given read or read-write access for the device.

#include <cstddef>
#include <vector>

#include "cuda_context.hpp"
#include "range_mapper.hpp"

namespace gpumem::detail {

class cuda_range_mapper final : public range_mapper {
 public:
  /// @throws CudaError when the device's context or the range cannot be had.
  cuda_range_mapper(const cuda::driver_api& cu, int device, std::size_t max_size,
                    std::size_t chunk_size);

  void* base() const noexcept override;
  void map(std::size_t index, int fd, Access access) override;
  void unmap(std::size_t index) override;

 private:
  /// The handle before the mapping: a chunk is unmapped before its handle is released.
  struct mapped_chunk {
    cuda::allocation_handle handle;
    cuda::mapped_range mapping;
  };

  const cuda::driver_api& cu_;
  std::size_t chunk_size_;
  // In the order they are made, so that they go in reverse: chunks, range, context.
  cuda::primary_context context_;
  cuda::address_range range_;
  std::vector<mapped_chunk> chunks_;  ///< by index; empty owners where nothing is mapped
};

}  // namespace gpumem::detail
