#pragma once
/// @file
/// @brief What a kernel needs to use a lock, barrier or channel: plain addresses on the
/// device's signal page, passed to the kernel by value. Made by Lock::device(),
/// Barrier::device() and Channel::device(); used with the functions of gpumem/device.cuh.

#include <cstdint>

namespace gpumem::device {

struct lock_ref {
  unsigned int* word;        ///< 0 free, else the holder's slot
  unsigned int* owner_died;  ///< set by the daemon when a holder's process died holding it
  unsigned int slot;         ///< this process's slot: what the word holds while it holds it
};

/// How far the daemon moves the counter of a party that died or left, after it sets the
/// broken word: far enough that no stream waits on it forever, and far enough past any target
/// a live party can have that a kernel can tell the jump from a real count (device.cuh).
inline constexpr unsigned int kBrokenLead = 1u << 30;

/// Per-party monotonic counters (barrier rounds; channel items published and consumed).
struct counters_ref {
  unsigned int* counts;  ///< one per party
  unsigned int* broken;  ///< set by the daemon when a party died
  unsigned int parties;
  unsigned int party;  ///< this process's own counter
};

}  // namespace gpumem::device
