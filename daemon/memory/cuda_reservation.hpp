#pragma once
/// @file
/// @brief A reservation backed by cuMemCreate chunks of the device's recommended granularity
/// (2 MiB on an H100) or a power-of-two multiple of it (kMostChunks), each exported once as a
/// POSIX fd.

#include <cuda.h>

#include <vector>

#include "gpumem/shared/cuda/driver.hpp"
#include "gpumem/shared/cuda/handles.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "memory/reservation.hpp"

namespace gpumem::daemon {

class cuda_reservation final : public reservation {
 public:
  /// @brief Chunks a full reservation has at most: its chunk is the device's granularity (2 MiB
  /// on an H100) doubled until the reservation's size fits in this many. Every chunk costs each
  /// holder an import and a mapping, and the daemon a mapping and a release per sleep or wake,
  /// tens of microseconds each: in 2 MiB chunks, mapping 8 GiB took the daemon 130 ms, as long
  /// as copying them. Growth and shrinking go a chunk at a time, so a larger reservation grows in
  /// larger steps: at least 1/256 of its size, less than 2/256 (or the granularity).
  static constexpr std::uint64_t kMostChunks = 256;

  /// @param chunk_size 0: chosen by the rule of kMostChunks; else a multiple of the device's
  /// granularity (reservation_maker).
  /// @throws request_error for a bad device; cuda_error for driver failures.
  cuda_reservation(const cuda::driver_api& driver, std::int32_t device, std::uint64_t max_size,
                   std::uint64_t chunk_size = 0);
  /// @brief Re-adoption: a previous daemon's chunks, held by their fds only. The driver lets
  /// no process but the maker export a chunk again, and none needs to: clients import the fd.
  cuda_reservation(const cuda::driver_api& driver, std::int32_t device, std::uint64_t max_size,
                   std::uint64_t chunk_size, std::vector<adopted_chunk> chunks);

  std::uint64_t chunk_size() const noexcept override { return chunk_size_; }
  std::uint64_t max_size() const noexcept override { return max_size_; }
  std::int32_t device() const noexcept override { return device_; }
  std::size_t chunk_count() const noexcept override { return chunks_.size(); }
  chunk chunk_at(std::size_t index) const override;
  void resize(std::size_t chunks) override;
  void copy_out(sleep_copy& host) const override;
  void copy_in(sleep_copy& host) override;
  void clear() override;

 private:
  /// The chunks mapped read-write in a range of the daemon's own, for the copies of sleep and
  /// wake. Members go in reverse: mappings, then imported handles, then the range.
  struct daemon_view {
    cuda::address_range range;
    std::vector<cuda::allocation_handle> imported;
    std::vector<cuda::mapped_range> mappings;
  };
  daemon_view map_here() const;
  /// Pins @p host for this device unless a copy already did.
  void pin(sleep_copy& host) const;
  enum class direction { to_host, to_device };
  void transfer(sleep_copy& host, direction way) const;
  struct physical {
    std::uint64_t id = 0;
    cuda::allocation_handle handle;  ///< empty for an adopted chunk
    unique_fd exported;
  };
  /// Sets the allocation properties for @p device and retains its context.
  void enter_device();

  const cuda::driver_api& cu_;
  std::int32_t device_;
  cuda::primary_context context_;  ///< declared before the chunks: released after them
  CUmemAllocationProp properties_{};
  std::uint64_t chunk_size_ = 0;
  std::uint64_t max_size_ = 0;
  std::vector<physical> chunks_;
};

/// @brief The maker gpumemd uses when the CUDA driver is there.
reservation_maker cuda_reservation_maker(const cuda::driver_api& driver);
reservation_adopter cuda_reservation_adopter(const cuda::driver_api& driver);

}  // namespace gpumem::daemon
