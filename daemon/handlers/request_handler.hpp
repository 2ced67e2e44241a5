#pragma once
/// @file
/// @brief daemon/handlers/: one request frame in, one reply frame out.
///
/// The dispatch (request_handler.cpp) decodes and validates a payload by the protocol table
/// and turns errors into error replies; each message's handler lives in the file of its domain
/// (client_handlers.cpp: session, statistics and clients; memory_handlers.cpp: pools,
/// allocations; reservation_handlers.cpp: reservations; sync_handlers.cpp: locks, barriers,
/// channels; observer_handlers.cpp: metrics and events) and calls that domain's book. Wire types
/// stop here: the books below return or take them only at their edge. May include: proto/ and
/// shared/ headers, daemon/books.hpp and the folders it includes, daemon/metrics/,
/// daemon/request_error.hpp. Not: daemon/net/.

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "books.hpp"
#include "gpumem/proto/codec.hpp"

namespace gpumem::daemon {

/// What a session knows about its client that handlers need.
struct client_state {
  client_id client = 0;
  bool greeted = false;
  bool refused = false;  ///< the policy turned the connection away: close once answered
  /// The session was resumed by hello: its next request may be the call that was in flight
  /// (handlers/kept_reply.hpp).
  bool resumed = false;
  /// subscribe_events was just answered: the session streams events from here on.
  bool subscribing = false;
  /// open_mailbox was just answered: the session makes the mailbox and attaches it.
  bool opening_mailbox = false;
  /// The connection has its request mailbox (net/request_mailbox.hpp).
  bool mailbox_open = false;
  /// get_metrics: the rendering whose later pages the client reads, and its number.
  std::string metrics_text;
  std::uint64_t metrics_snapshot = 0;
};

/// Descriptors to send with the reply, still owned by their pool, reservation or page.
struct reply_attachment {
  std::vector<int> fds;
  proto::handle_type handle = proto::handle_type::none;
};

class request_handler {
 public:
  explicit request_handler(books& state) : books_(state) {}

  /// @brief Appends the reply to @p frame to @p out, and keeps it in the client's row when the
  /// request changes state (handlers/kept_reply.hpp).
  /// @return the descriptors to attach to that reply, if any.
  reply_attachment handle(client_state& client, const proto::frame_view& frame,
                          std::vector<std::byte>& out);

 private:
  reply_attachment answer(client_state& client, const proto::frame_view& frame,
                          std::vector<std::byte>& out);
  reply_attachment dispatch(client_state& client, const proto::frame_view& frame,
                            std::vector<std::byte>& out);
  /// The descriptors a kept reply went with (reserve's and open_reservation's notice page,
  /// open_sync's and open_channel's lock page), found again from what the reply names: the
  /// row keeps only bytes.
  /// @throws request_error when the object it names is gone.
  reply_attachment reattach(const std::vector<std::byte>& kept) const;
  /// Counts the request and the reply at @p reply (metrics/request_counters.hpp).
  void count(std::uint16_t type, std::span<const std::byte> reply,
             std::chrono::steady_clock::time_point received) noexcept;

#define GPUMEM_X(name, id, request, reply, reply_fd_count, summary)           \
  proto::reply on_##name(client_state& client, const proto::request& message, \
                         reply_attachment& attach);
  GPUMEM_MESSAGE_TABLE(GPUMEM_X)
#undef GPUMEM_X

  books& books_;
  std::uint64_t last_metrics_snapshot_ = 0;
};

/// @brief Appends an error reply frame.
void append_error(std::vector<std::byte>& out, std::uint32_t request_id, proto::errc code,
                  std::string_view text);

}  // namespace gpumem::daemon
