#pragma once
/// @file
/// @brief The layout of the pages that hold lock and barrier state, shared by the daemon, every
/// client, and (for the signal page) kernels.
///
/// A host page is a memfd mapped by the daemon and by each client that uses a lock or a
/// barrier of its access class (the daemon keeps one page per class, so that a client can
/// write only cells of objects it may use): an array of cells, one per named object, whose
/// words clients change with atomics and sleep on with futexes. A signal page is a 2 MiB VMM
/// chunk per host page and device holding the words that streams (cuStreamWaitValue32) and
/// kernels use; its cells have the host page's indices.

#include <bitset>
#include <cstddef>
#include <cstdint>

namespace gpumem::sync {

inline constexpr std::size_t kCellSize = 4096;
inline constexpr std::uint32_t kCellCount = 1024;
inline constexpr std::size_t kHostPageSize = kCellSize * kCellCount;

/// A cell's id names it across pages (on the wire: open, close, lists).
constexpr std::uint32_t cell_id(std::uint32_t page, std::uint32_t index) noexcept {
  return page * kCellCount + index;
}
constexpr std::uint32_t page_of_cell(std::uint32_t id) noexcept {
  return id / kCellCount;
}
constexpr std::uint32_t index_of_cell(std::uint32_t id) noexcept {
  return id % kCellCount;
}
/// Page ids for which every cell id fits in 32 bits.
inline constexpr std::uint32_t kMaxPages = 0xffffffffu / kCellCount;

/// Client slots are 12 bits in a lock word; 0 means nobody.
inline constexpr std::uint32_t kMaxSlots = 4095;
/// Which slots are in use, indexed by slot.
using slot_set = std::bitset<kMaxSlots + 1>;
/// Tickets of one lock that may be taken and not yet served at once.
inline constexpr std::uint32_t kLockQueueLength = 512;
/// A stream-ordered lock's turns still to come are fewer than this many tickets ahead of its
/// `serving` word, cyclically in 16 bits: a ticket is taken only once the queue entry of the
/// ticket kLockQueueLength before it is free, and that entry is freed only after its turn has
/// passed (by the holder's stream, right after it writes the next turn; by the daemon, once its
/// pass of a dead holder's turn has landed or the word is found past the turn). A turn this
/// far ahead or farther is behind: the bound is exclusive.
inline constexpr std::uint16_t kTurnsAheadBound = kLockQueueLength;
/// Parties of one barrier (producer and consumers of one channel).
inline constexpr std::uint32_t kMaxParties = 120;

/// Where an object's holders wait. Set by its first use; mixing is refused because a host
/// waiter sleeps on host memory while a stream or a kernel waits on device memory.
enum class domain : std::uint32_t { unset = 0, host = 1, stream = 2, device = 3 };

/// A cell's domain word: the domain, and for stream and device the CUDA device whose signal
/// page holds the words.
constexpr std::uint32_t domain_word(domain where, int device = 0) noexcept {
  return static_cast<std::uint32_t>(where) | static_cast<std::uint32_t>(device) << 8;
}
constexpr domain domain_of(std::uint32_t word) noexcept {
  return static_cast<domain>(word & 0xff);
}
constexpr int device_of(std::uint32_t word) noexcept {
  return static_cast<int>(word >> 8);
}
/// Whether @p word is one that domain_word() makes: a known domain, and a device only for the
/// device forms.
constexpr bool is_domain_word(std::uint32_t word) noexcept {
  const auto where = static_cast<domain>(word & 0xff);
  if (where == domain::stream || where == domain::device) return true;
  return (where == domain::unset || where == domain::host) && (word >> 8) == 0;
}

/// A lock's state word: everything a hand-off changes, changed by one compare-and-swap.
///   bits  0-15 serving ticket   16-27 owner slot   28-31 flags
///   bits 32-47 next ticket      48-63 epoch (bumped by an operator reset)
///
/// Its three shapes:
/// - free: no owner and no ticket taken (serving == next);
/// - held alone: an owner and no ticket taken. An uncontended lock + unlock only sets and
///   clears the owner, so the word returns to the very value it had, and a process that
///   remembers that value takes and releases the lock without storing anything in between
///   (gpumem/lock_fast_path.hpp says why that matters);
/// - held in the queue: the owner holds ticket `serving`, and next - serving - 1 waiters
///   queue behind it. The first waiter to come to a lock held alone takes two tickets, the
///   holder's (serving) and its own, so the holder's hold stays {serving, epoch} throughout.
struct lock_word {
  static constexpr std::uint8_t kOwnerDied = 1;       ///< the last holder died holding it
  static constexpr std::uint8_t kNotRecoverable = 2;  ///< released without being made consistent

  std::uint16_t serving = 0;
  std::uint16_t owner = 0;
  std::uint8_t flags = 0;
  std::uint16_t next = 0;
  std::uint16_t epoch = 0;

  static constexpr lock_word decode(std::uint64_t raw) noexcept {
    return {static_cast<std::uint16_t>(raw), static_cast<std::uint16_t>((raw >> 16) & 0xfff),
            static_cast<std::uint8_t>((raw >> 28) & 0xf), static_cast<std::uint16_t>(raw >> 32),
            static_cast<std::uint16_t>(raw >> 48)};
  }
  constexpr std::uint64_t encode() const noexcept {
    return std::uint64_t{serving} | std::uint64_t{owner & 0xfffu} << 16 |
           std::uint64_t{flags & 0xfu} << 28 | std::uint64_t{next} << 32 |
           std::uint64_t{epoch} << 48;
  }
  constexpr bool free() const noexcept { return serving == next && owner == 0; }
  constexpr bool held_alone() const noexcept { return serving == next && owner != 0; }
  /// Tickets taken and not yet served, the holder's included (none while held alone).
  constexpr std::uint16_t queued() const noexcept {
    return static_cast<std::uint16_t>(next - serving);
  }
  /// Holders waiting behind the one that holds it.
  constexpr std::uint16_t waiting() const noexcept {
    return queued() == 0 ? 0 : static_cast<std::uint16_t>(queued() - 1);
  }
  /// The ticket the next waiter takes: after the holder's, which a lock held alone has not
  /// taken yet (see the shapes above).
  constexpr std::uint16_t ticket_to_take() const noexcept {
    return static_cast<std::uint16_t>(next + (held_alone() ? 1 : 0));
  }
};

/// One waiter's place in a lock's queue, at index ticket % kLockQueueLength. Zero is empty.
///   bits 0-15 ticket   16-27 slot   28 stream-ordered   30-31 state
struct queue_entry {
  enum state_type : std::uint8_t { empty = 0, waiting = 1, granted = 2, abandoned = 3 };

  std::uint16_t ticket = 0;
  std::uint16_t slot = 0;
  bool stream = false;
  state_type state = empty;

  static constexpr queue_entry decode(std::uint32_t raw) noexcept {
    return {static_cast<std::uint16_t>(raw), static_cast<std::uint16_t>((raw >> 16) & 0xfff),
            ((raw >> 28) & 1u) != 0, static_cast<state_type>(raw >> 30)};
  }
  constexpr std::uint32_t encode() const noexcept {
    return std::uint32_t{ticket} | std::uint32_t{slot & 0xfffu} << 16 |
           std::uint32_t{stream ? 1u : 0u} << 28 | std::uint32_t{state} << 30;
  }
  constexpr queue_entry with(state_type changed) const noexcept {
    queue_entry copy = *this;
    copy.state = changed;
    return copy;
  }
};

struct lock_cell {
  std::uint64_t word;
  std::uint32_t domain;
  std::uint32_t owner_deaths;  ///< how often a holder died holding it, for operators
  std::uint32_t queue[kLockQueueLength];
};
static_assert(sizeof(lock_cell) <= kCellSize);

/// Barrier and channel: one monotonic counter per party (arrivals, items published or
/// consumed) that only its party writes, so no party needs an atomic add — a stream cannot
/// do one. A counter of kBrokenCount means its party died.
struct counter_cell {
  static constexpr std::uint32_t kBroken = 1;
  static constexpr std::uint32_t kBrokenCount = 0xffffffffu;

  std::uint32_t domain;
  std::uint32_t parties;
  std::uint32_t state;  ///< kBroken
  std::uint32_t epoch;  ///< bumped by a reset; a party that sees it change starts over
  /// Host barriers: arrivals of all parties so far, so that a waiter sleeps on one word and
  /// the last arriver of a round wakes everyone with one call.
  std::uint32_t arrivals;
  std::uint32_t counts[kMaxParties];
};
static_assert(sizeof(counter_cell) <= kCellSize);

/// A cell of the signal page (device memory): what streams and kernels wait on.
inline constexpr std::size_t kSignalCellSize = 512;
inline constexpr std::size_t kSignalPageSize = std::size_t{2} << 20;
struct signal_cell {
  std::uint32_t serving;      ///< stream-ordered lock: the ticket being served
  std::uint32_t device_lock;  ///< device lock: 0 free, else the holder's slot
  std::uint32_t owner_died;   ///< device lock: set when a holder's process died holding it
  std::uint32_t broken;       ///< counters: a party died
  std::uint32_t counts[kMaxParties];
};
static_assert(sizeof(signal_cell) <= kSignalCellSize);
static_assert(kSignalCellSize * kCellCount <= kSignalPageSize);

}  // namespace gpumem::sync
