#pragma once
/// @file
/// @brief The fast path: lease one buffer from gpumemd and sub-allocate inside it with no
/// round trip to the daemon.
///
/// @code
///   gpumem::Slab slab = gpumem::Slab::lease(client, 64 << 20, {.device = 0, .name = "decoder",
///                                                              .stream = s});
///   gpumem::SlabPiece piece = slab.allocate(4096);      // no system call, well under 1 us
///   kernel<<<..., s>>>(slab.data(piece));
///   send(peer, &piece, sizeof piece);                    // (slab name, offset, size) travels
///   // in the peer: auto same = client.open("decoder"); same.at(piece)
///   slab.free(piece);
/// @endcode
///
/// Pieces follow the slab's stream order: a freed piece may be handed out again at once, which
/// is safe for work queued on the slab's stream (as with cudaMallocAsync on one stream). Work
/// on other streams must be ordered with events first. The slab goes back to the daemon with
/// the Slab object, or with its process.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "gpumem/gpumem.hpp"

namespace gpumem {

/// A sub-allocation, small and trivially copyable so that it can be sent to another process.
struct SlabPiece {
  std::uint64_t slab = 0;  ///< the slab's allocation id (Buffer::id())
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

class GPUMEM_API Slab {
 public:
  /// Every piece starts on this boundary (CUDA's own allocation alignment).
  static constexpr std::size_t kAlignment = 256;

  /// @brief Allocates the slab through the daemon (one round trip).
  /// @throws Error as Client::allocate does.
  static Slab lease(Client& client, std::size_t bytes, const AllocateOptions& options = {});

  Slab(Slab&&) noexcept;
  Slab& operator=(Slab&&) noexcept;
  ~Slab();

  /// @throws Error(out_of_memory) when no free range is large enough, Error(invalid_argument)
  /// for 0 bytes. Thread-safe.
  SlabPiece allocate(std::size_t bytes);
  /// @throws Error(invalid_argument) for a piece that is not a live piece of this slab.
  void free(const SlabPiece& piece);
  /// @brief Where the piece lives in this process (a device pointer for CUDA slabs).
  void* data(const SlabPiece& piece) const;

  const Buffer& buffer() const noexcept;
  std::size_t bytes_free() const;

 private:
  struct state;
  explicit Slab(std::unique_ptr<state> self);
  std::unique_ptr<state> self_;
};

}  // namespace gpumem
