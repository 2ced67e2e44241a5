#pragma once
/// @file
/// @brief What happens in gpumemd as it happens: clients connecting and leaving, what a dead
/// client's memory and locks became, refusals.
///
/// @code
///   auto events = gpumem::EventStream::open();
///   while (auto event = events.next(std::chrono::seconds(1))) {
///     if (event->kind == gpumem::EventKind::died) std::cout << event->pid << " died\n";
///   }
/// @endcode
///
/// A stream is a connection of its own. Administrators (root, access.admin_group) see every
/// event; others see the events about their own uid. The daemon never waits for a stream: it
/// queues a bounded number of events for one that reads slowly, drops the rest, and tells it
/// with an EventKind::lost event, in order, once it reads again. A stream ends when the daemon
/// stops (next() throws connection_closed); it is not resumed when gpumemd restarts.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gpumem/gpumem.hpp"

namespace gpumem {

enum class EventKind {
  connected,     ///< a client said hello
  disconnected,  ///< a client's connection ended while its process lived on
  died,          ///< a client's process exited while it was a client
  reclaimed,     ///< after disconnected or died: what the client owned was taken back
  owner_died,    ///< a lock's holder died holding it: the next holder is told so
  refused,       ///< a request or connection was refused (permission or quota)
  lost,          ///< this stream read too slowly: `count` events were dropped here
};

/// @brief "connected", "died", "owner_died", ...
GPUMEM_API const char* to_string(EventKind kind) noexcept;

struct Event {
  std::uint64_t sequence = 0;  ///< the daemon's count of events; gaps: events of other uids
  std::chrono::system_clock::time_point time{};
  EventKind kind = EventKind::connected;
  /// The client it is about (for owner_died: the holder that died; 0 when it was already gone).
  std::uint64_t client = 0;
  std::uint32_t pid = 0;
  std::uint32_t uid = 0;
  std::string label;
  std::uint64_t bytes = 0;  ///< reclaimed: memory the client owned
  /// reclaimed: objects the client owned; lost: events dropped; refused: refusals held back
  /// before this one (they are rate-limited)
  std::uint64_t count = 0;
  errc code = errc::ok;  ///< refused: why
  std::string request;   ///< refused: the request's message type ("allocate"), "hello" to connect
  std::string object;    ///< owner_died: the lock
  /// refused: the rule, in the daemon's words; owner_died: how a live holder let go (empty for
  /// a death)
  std::string reason;
};

class GPUMEM_API EventStream {
 public:
  /// @brief Connects and subscribes.
  /// @throws Error as Client::connect does.
  static EventStream open(const ConnectOptions& options = {});

  EventStream(EventStream&&) noexcept;
  EventStream& operator=(EventStream&&) noexcept;
  ~EventStream();

  /// @brief The next event; nullopt when none came within @p timeout.
  /// @throws Error(connection_closed) when the daemon ended the stream; Error(bad_message) when
  /// what it sent breaks the protocol.
  std::optional<Event> next(std::chrono::milliseconds timeout);
  /// @brief True when this stream sees every uid's events (an administrator's).
  bool every_uid() const noexcept;

 private:
  struct state;
  explicit EventStream(std::unique_ptr<state> opened);
  std::unique_ptr<state> state_;
};

}  // namespace gpumem
