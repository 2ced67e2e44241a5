#pragma once
// The payload type of each message type, for fuzz targets that decode whatever type a header
// names: requests, their replies and the error reply, from the protocol table.

#include <cstdint>

#include "gpumem/proto/messages.hpp"

namespace gpumem::fuzz {

/// @brief Calls `visit.template operator()<Payload>()` with the payload type of @p type.
/// @return false when no message has that type.
template <class Visit>
bool with_payload_type(std::uint16_t type, Visit&& visit) {
  if (type == static_cast<std::uint16_t>(proto::message_type::error)) {
    visit.template operator()<proto::error_reply>();
    return true;
  }
  switch (type) {
#define GPUMEM_X(name, number, request, reply, reply_fd_count, summary) \
  case number:                                                          \
    visit.template operator()<proto::request>();                        \
    return true;                                                        \
  case number | proto::kReplyBit:                                       \
    visit.template operator()<proto::reply>();                          \
    return true;
    GPUMEM_MESSAGE_TABLE(GPUMEM_X)
#undef GPUMEM_X
    default:
      return false;
  }
}

}  // namespace gpumem::fuzz
