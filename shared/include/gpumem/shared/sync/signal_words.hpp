#pragma once
/// @file
/// @brief How the daemon reaches the words of a device's signal page (device memory that
/// streams and kernels wait on) to repair them after a death or a reset. The CUDA page
/// implements it in the daemon; tests can implement it in host memory.

#include <cstddef>
#include <cstdint>

namespace gpumem::sync {

class signal_words {
 public:
  signal_words() = default;
  signal_words(const signal_words&) = delete;
  signal_words& operator=(const signal_words&) = delete;
  virtual ~signal_words() = default;

  /// @brief The 32-bit word at @p offset in @p cell, as the GPU last wrote it: after the
  /// writes and clears queued before it, unless they take longer than a bound.
  virtual std::uint32_t read(std::uint32_t cell, std::size_t offset) = 0;
  /// @brief Stores @p value in stream order after the writes and clears queued before it.
  virtual void write(std::uint32_t cell, std::size_t offset, std::uint32_t value) = 0;
  /// @brief Once the cell's `serving` word equals @p turn, stores @p next_turn (passing on
  /// the turn of a stream-ordered lock that a dead client will never take), without blocking
  /// and without waiting for any other turn: the turns of different locks come in any order. A
  /// word past @p turn already (@p turn kTurnsAheadBound or more ahead of it, cyclically) needs
  /// nothing. Each turn is given once.
  virtual void pass_turn(std::uint32_t cell, std::uint32_t turn, std::uint32_t next_turn) = 0;
  /// @brief Zeroes a cell for its next object or epoch, after the writes queued before it;
  /// returns once it is zero, or after a bound (the daemon waits on nobody).
  virtual void clear(std::uint32_t cell) = 0;
};

}  // namespace gpumem::sync
