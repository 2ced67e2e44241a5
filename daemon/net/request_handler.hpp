#pragma once
/// @file
/// @brief Turns one request frame into one reply frame: decode and validate the payload, call
/// the registry, encode the reply or an error. One handler per message of the protocol table.

#include <cstdint>
#include <vector>

#include "gpumem/proto/codec.hpp"
#include "registry.hpp"

namespace gpumem::daemon {

/// What a session knows about its client that handlers need.
struct client_state {
  std::uint64_t client_id = 0;
  bool greeted = false;
};

/// Descriptors to send with the reply, still owned by their pool or reservation.
struct reply_attachment {
  std::vector<int> fds;
  proto::handle_type handle = proto::handle_type::none;
};

class request_handler {
 public:
  explicit request_handler(registry& books) : books_(books) {}

  /// @brief Appends the reply to @p frame to @p out.
  /// @return the descriptors to attach to that reply, if any.
  reply_attachment handle(client_state& client, const proto::frame_view& frame,
                          std::vector<std::byte>& out);

 private:
#define GPUMEM_X(name, id, request, reply, reply_fd_count, summary)           \
  proto::reply on_##name(client_state& client, const proto::request& message, \
                         reply_attachment& attach);
  GPUMEM_MESSAGE_TABLE(GPUMEM_X)
#undef GPUMEM_X

  registry& books_;
};

/// @brief Appends an error reply frame.
void append_error(std::vector<std::byte>& out, std::uint32_t request_id, proto::errc code,
                  std::string_view text);

}  // namespace gpumem::daemon
