#pragma once
/// @file
/// @brief A host reservation's range: PROT_NONE anonymous memory reserved (never backed), with
/// each chunk's memfd mapped shared over its slot with MAP_FIXED, and a slot put back to
/// PROT_NONE, never left as a hole another mmap could take.

#include <cstddef>

#include "gpumem/shared/os/mapping.hpp"
#include "range_mapper.hpp"

namespace gpumem::detail {

class host_range_mapper final : public range_mapper {
 public:
  /// @throws Error(out_of_memory) when the address space has no room for @p max_size bytes.
  host_range_mapper(std::size_t max_size, std::size_t chunk_size);

  void* base() const noexcept override { return reserved_.get(); }
  void map(std::size_t index, int fd, Access access) override;
  void unmap(std::size_t index) override;

 private:
  std::byte* slot(std::size_t index) const noexcept;

  os::mapping reserved_;  ///< the whole range: munmap gives back the chunks' mappings too
  std::size_t chunk_size_;
};

}  // namespace gpumem::detail
