#pragma once
/// @file
/// @brief The request mailbox: a second way from one connection to the daemon, through shared
/// memory, for the requests whose reply carries no descriptor (mailbox_may_carry()).
///
/// Why: over the Unix socket, most of a small request's cost is the kernel's, a receive and a
/// send on each side (README, Benchmarks). Through the mailbox the client writes the request
/// where the daemon reads it and rings an eventfd, and the daemon writes the reply where the
/// client reads it and wakes the client's futex: a write and a futex wait for the client, an
/// epoll event and a futex wake for the daemon.
///
/// The connection asks for it (open_mailbox, when hello's reply has kFeatureMailbox) and gets
/// two descriptors: a memfd of kMailboxBytes laid out as mailbox_layout, which the daemon made
/// and sealed against resizing, and the doorbell, an eventfd the daemon watches and never reads.
/// One call at a time, as on the socket:
///   client: writes the request frame to `request` and its size to `request_size`, bumps
///           `request_seq` (release), writes 1 to the doorbell, sleeps on `reply_seq`;
///   daemon: on the ring, copies the frame out (what it parses is the copy, never the slot);
///           when it is the only request of the loop's wake-up, sets `reply_seq` to
///           answering_mark(request_seq) and wakes futex sleepers on it; answers into `reply`
///           and `reply_size`, sets `reply_seq` to the request_seq it answered (release), wakes
///           futex sleepers on it.
/// The mark lets the client's wake-up, several microseconds on a GPU host, overlap the daemon's
/// handling of the request: a client woken by it spins for the answer a while (its library,
/// kSpinWhileAnswering) before it sleeps again. A client that knows no mark only sees a
/// `reply_seq` that is not yet its answer, and sleeps on it until the answer changes it.
/// The mailbox lives and dies with its connection: a client learns that the daemon went away
/// from the socket, which it watches while it waits.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "gpumem/proto/messages.hpp"

namespace gpumem::proto {

/// The value of mailbox_layout::closing once the client closes of its own accord.
inline constexpr std::uint32_t kClosingCleanly = 0x62796521;  // "bye!"

struct mailbox_layout {
  // Written by the client.
  alignas(64) std::uint32_t request_seq;
  std::uint32_t request_size;
  /// kClosingCleanly, stored by the library just before it closes the connection of its own
  /// accord (a Client destroyed in the process that connected it); 0 before. The daemon reads
  /// it when the connection ends, to tell a close from a death whose process had exited by then
  /// (a close it read late). A client can write it at will, so it decides nothing but how that
  /// client's own departure is told (died or disconnected). In the padding of the first line:
  /// the layout is otherwise as before, and a library that never writes it leaves it 0.
  std::uint32_t closing;
  // Written by the daemon; reply_seq is the futex word the client sleeps on.
  alignas(64) std::uint32_t reply_seq;
  std::uint32_t reply_size;
  alignas(64) std::byte request[kMaxFrameSize];
  alignas(64) std::byte reply[kMaxFrameSize];
};

inline constexpr std::size_t kMailboxBytes = (sizeof(mailbox_layout) + 4095) / 4096 * 4096;

/// @brief Whether a request of @p type may come through the mailbox: its reply carries no
/// descriptor, and it is neither hello nor subscribe_events, which belong to the connection.
constexpr bool mailbox_may_carry(const message_info& type) noexcept {
  return type.reply_fds == 0 && type.type != message_type::hello &&
         type.type != message_type::subscribe_events;
}

/// @brief The value of `reply_seq` while the daemon handles the request numbered
/// @p request_seq: never that number, so never taken for the answer.
constexpr std::uint32_t answering_mark(std::uint32_t request_seq) noexcept {
  return ~request_seq;
}

/// The words of the layout as atomics: the other process writes them while this one reads.
inline std::atomic_ref<std::uint32_t> mailbox_word(std::uint32_t& word) noexcept {
  return std::atomic_ref<std::uint32_t>(word);
}

}  // namespace gpumem::proto
