#pragma once
/// @file
/// @brief Exactly once for the call a client had in flight when its daemon went away.
///
/// The client cannot know whether a request whose reply it never got was carried out: it
/// resumes its session and sends the request again, with the same id. For a request that
/// changes the daemon's state, the reply it got is kept in the client's row (the restarted
/// daemon reads the row back), and a resumed session's first request that repeats it is
/// answered from there, with the descriptors the reply names found again
/// (request_handler::reattach). Requests that only fetch what exists (pools, chunks, pages) are
/// handled again.

#include <vector>

#include "gpumem/proto/messages.hpp"
#include "ledger/ledger.hpp"

namespace gpumem::daemon {

/// @brief True for the requests whose reply is kept: those that change the daemon's state.
constexpr bool keeps_reply(proto::message_type type) noexcept {
  using enum proto::message_type;
  switch (type) {
    case allocate:
    case open:
    case release:
    case reserve:
    case open_reservation:
    case resize_reservation:
    case release_reservation:
    case begin_version:
    case commit_version:
    case abandon_version:
    case quiesce_reservation:
    case sleep_reservation:
    case wake_reservation:
    case open_sync:
    case open_channel:
    case close_sync:
    case reset_sync:
      return true;
    default:
      return false;
  }
}

/// @brief The kept reply to send for @p request, the first request of a resumed session,
/// instead of handling it: when it repeats the last kept request (the same id and type).
/// @return nullptr when the request is to be handled.
inline const std::vector<std::byte>* kept_reply(const answered_request& last,
                                                const proto::header& request) noexcept {
  const bool repeated = last.request_id != 0 && request.request_id == last.request_id &&
                        request.type == static_cast<std::uint16_t>(last.type);
  return repeated ? &last.reply : nullptr;
}

}  // namespace gpumem::daemon
