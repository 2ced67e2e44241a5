#pragma once
/// @file
/// @brief The notice page of a reservation: a sealed memfd that the daemon writes and every
/// holder maps read-only, so that a holder learns of a change without asking.
///
/// The daemon bumps `generation` (and wakes futex waiters on it) after each change a holder is
/// to act on: a version committed, chunks committed or decommitted, a sleep begun, ended or
/// failed, a wake. A holder keeps the generation of the daemon's last answer; while the page
/// shows the same, refresh() has nothing to do and asks nothing. The words are hints only: what
/// to map always comes from the daemon's answer.

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpumem {

struct reservation_notice {
  std::uint32_t generation;  ///< futex word
  std::uint32_t state;       ///< proto::reservation_state
  std::uint64_t version;     ///< the current version
};

inline constexpr std::size_t kReservationNoticeBytes = 4096;

// Loads only: holders map the page read-only (atomic_ref of a const type is C++26).
inline std::uint32_t notice_generation(const reservation_notice& notice) noexcept {
  return std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(notice.generation))
      .load(std::memory_order_acquire);
}
inline std::uint64_t notice_version(const reservation_notice& notice) noexcept {
  return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(notice.version))
      .load(std::memory_order_acquire);
}

}  // namespace gpumem
