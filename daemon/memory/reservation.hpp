#pragma once
/// @file
/// @brief The physical side of one version of a reservation as the daemon holds it: an ordered
/// list of equal chunks, each exportable as a descriptor (VMM chunks on a GPU, memfds on the
/// host). Clients reserve their own virtual range and map the chunks at the same offsets, so the
/// shared range grows and shrinks in place.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "gpumem/shared/unique_fd.hpp"
#include "memory/sleep_copy.hpp"

namespace gpumem::daemon {

class reservation {
 public:
  struct chunk {
    std::uint64_t id;  ///< unique in the daemon's life: a new chunk never reuses an id
    int fd;            ///< the chunk's shareable handle, owned by the reservation
    int read_only_fd;  ///< what readers get: the host backend's cannot map writable
  };

  reservation() = default;
  reservation(const reservation&) = delete;
  reservation& operator=(const reservation&) = delete;
  virtual ~reservation() = default;

  virtual std::uint64_t chunk_size() const noexcept = 0;
  virtual std::uint64_t max_size() const noexcept = 0;
  virtual std::int32_t device() const noexcept = 0;
  virtual std::size_t chunk_count() const noexcept = 0;
  virtual chunk chunk_at(std::size_t index) const = 0;
  /// @brief Commits chunks at the end, or lets the last ones go, until @p chunks are committed.
  /// Clients that still map a chunk keep it alive until they unmap it.
  /// @throws request_error(out_of_memory) when the device has no room; nothing changes then.
  virtual void resize(std::size_t chunks) = 0;

  /// @name Sleep and wake. They run on a worker thread while the loop leaves the reservation
  /// and @p host alone; @p host holds committed() bytes. A device backend pins @p host the first
  /// time and leaves it pinned (sleep_copy::pinned). @throws request_error, cuda::cuda_error
  /// @{
  virtual void copy_out(sleep_copy& host) const = 0;
  virtual void copy_in(sleep_copy& host) = 0;
  virtual void clear() = 0;  ///< every committed byte reads zero
  /// @}
  /// @brief Makes the chunks unchangeable where the backend can: the host seals its memfds
  /// against writing. CUDA has no such seal; readers map read-only all the same.
  /// @throws request_error(busy) when a chunk is still mapped writable somewhere.
  virtual void seal() {}

  std::uint64_t committed() const noexcept { return chunk_count() * chunk_size(); }
};

/// @brief Chunks of @p chunk bytes that hold @p bytes, the last one maybe in part; no overflow
/// near 2^64.
constexpr std::uint64_t whole_chunks(std::uint64_t bytes, std::uint64_t chunk) noexcept {
  return bytes / chunk + (bytes % chunk != 0);
}
/// @brief A reservation's @p max_size rounded up to whole chunks of @p chunk bytes.
/// @throws request_error(invalid_argument) when that is beyond 64 bits.
std::uint64_t whole_chunk_bytes(std::uint64_t max_size, std::uint64_t chunk);

/// @name Chunk ids: unique over the daemon's life and across the restarts that keep its state,
/// since clients know the chunks they mapped by id.
/// @{
std::uint64_t new_chunk_id() noexcept;
/// @brief The id the next chunk gets.
std::uint64_t next_chunk_id() noexcept;
/// @brief Ids below @p next are never given (again).
void chunk_ids_from(std::uint64_t next) noexcept;
/// @}

/// Makes the reservation of @p max_size bytes on @p device (never kHostDevice: the host
/// backend is always there, daemon/memory/host_reservation.hpp) in chunks of @p chunk_size:
/// 0 for a new reservation (the backend chooses), else the size of its earlier versions' chunks,
/// which holders map at multiples of it (a restarted daemon of a later release may choose
/// another). Throws request_error.
using reservation_maker = std::function<std::unique_ptr<reservation>(
    std::int32_t device, std::uint64_t max_size, std::uint64_t chunk_size)>;

/// A chunk that a previous daemon made, kept by its shareable fd (daemon/restart/).
struct adopted_chunk {
  std::uint64_t id;
  unique_fd fd;
};
/// Re-adoption: the reservation a previous daemon left, its chunks in order. Chunks made
/// later come after them. Throws request_error, cuda::cuda_error.
using reservation_adopter = std::function<std::unique_ptr<reservation>(
    std::int32_t device, std::uint64_t max_size, std::uint64_t chunk_size,
    std::vector<adopted_chunk> chunks)>;

}  // namespace gpumem::daemon
