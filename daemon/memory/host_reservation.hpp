#pragma once
/// @file
/// @brief A reservation on the host backend: each chunk is a memfd of kChunkSize bytes that
/// clients map with MAP_FIXED into a range they reserved (PROT_NONE), readers read-only.

#include <vector>

#include "gpumem/shared/unique_fd.hpp"
#include "memory/reservation.hpp"

namespace gpumem::daemon {

class host_reservation final : public reservation {
 public:
  /// The size of a GPU's VMM granularity (H100), so that code moves between backends unchanged.
  static constexpr std::uint64_t kChunkSize = 2u << 20;

  explicit host_reservation(std::uint64_t max_size);
  /// @brief Re-adoption: a previous daemon's chunks, by their memfds.
  host_reservation(std::uint64_t max_size, std::vector<adopted_chunk> chunks);

  std::uint64_t chunk_size() const noexcept override { return kChunkSize; }
  std::uint64_t max_size() const noexcept override { return max_size_; }
  std::int32_t device() const noexcept override;
  std::size_t chunk_count() const noexcept override { return chunks_.size(); }
  chunk chunk_at(std::size_t index) const override;
  void resize(std::size_t chunks) override;
  void copy_out(sleep_copy& host) const override;
  void copy_in(sleep_copy& host) override;
  void clear() override;
  void seal() override;

 private:
  struct memfd_chunk {
    std::uint64_t id = 0;
    unique_fd memory;
    unique_fd read_only;
  };
  static memfd_chunk make_chunk(std::uint64_t id, unique_fd memory);

  std::uint64_t max_size_;
  std::vector<memfd_chunk> chunks_;
};

/// @brief A reservation of @p max_size bytes on the host backend.
std::unique_ptr<reservation> make_host_reservation(std::uint64_t max_size);

}  // namespace gpumem::daemon
