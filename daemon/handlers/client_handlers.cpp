// Handlers of the session itself, statistics and the client list.
#include <fmt/format.h>
#include <unistd.h>

#include "gpumem/proto/mailbox.hpp"
#include "handlers/request_handler.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;

namespace {
// The connection takes the resumed session's row over; the row made for it at accept, which
// holds nothing yet, goes.
client_id resume_session(books& state, client_id fresh, const proto::hello_request& message) {
  const client_id wanted = message.resume_client_id;
  const auto resumed = state.resume(wanted, message.resume_token, state.rows.client(fresh).who);
  if (!resumed) {
    throw request_error(
        errc::session_lost,
        state.rows.clients().contains(wanted)
            ? fmt::format("session {} cannot be resumed here: another connection serves it, or "
                          "the token, uid or process does not match",
                          wanted)
            : fmt::format("no session {}: the daemon restarted without its state, or the "
                          "session ended",
                          wanted));
  }
  state.remove_client(fresh);
  return *resumed;
}
}  // namespace

proto::hello_reply request_handler::on_hello(client_state& client,
                                             const proto::hello_request& message,
                                             reply_attachment&) {
  if (client.greeted) throw request_error(errc::bad_message, "hello was already sent");
  if (message.resume_client_id != 0) {
    client.client = resume_session(books_, client.client, message);
    client.resumed = true;
  }
  books_.rows.set_label(client.client, std::string(message.client_label.view()),
                        message.client_pid);
  try {
    if (client.resumed) {
      // A resume takes no connection more: the session it carries on was counted, and the new
      // row it came in on is gone. Refused for a quota that others of its uid fill, it would
      // end the very session it came to keep.
      books_.access.check_connect(books_.rows.client(client.client).who);
    } else {
      books_.check_connection(client.client);
    }
  } catch (const request_error&) {
    client.refused = true;  // the dispatch logs the refusal
    throw;
  }
  client.greeted = true;
  const client_row& row = books_.rows.client(client.client);
  ++books_.activity.connections;
  books_.events.publish(
      event_hub::about(proto::event_kind::connected, client.client, row.who, row.label));
  return {.client_id = client.client,
          .pool_count = static_cast<std::uint32_t>(books_.memory.pool_count()),
          .max_payload_size = proto::kMaxPayloadSize,
          .daemon_pid = static_cast<std::uint32_t>(::getpid()),
          .features = books_.features(),
          .token = books_.rows.client(client.client).token,
          .daemon_instance = books_.instance};
}

proto::empty_payload request_handler::on_ping(client_state&, const proto::empty_payload&,
                                              reply_attachment&) {
  return {};
}

proto::mailbox_reply request_handler::on_open_mailbox(client_state& client,
                                                      const proto::empty_payload&,
                                                      reply_attachment&) {
  if (client.mailbox_open) {
    throw request_error(errc::invalid_argument, "this connection has a request mailbox already");
  }
  // The mailbox belongs to the connection: the session makes it, and attaches its descriptors.
  client.opening_mailbox = true;
  return {static_cast<std::uint32_t>(proto::kMailboxBytes), 0};
}

proto::stats_reply request_handler::on_stats(client_state&, const proto::empty_payload&,
                                             reply_attachment&) {
  return books_.stats();
}

proto::usage_list_reply request_handler::on_list_usage(client_state& client,
                                                       const proto::list_request& message,
                                                       reply_attachment&) {
  return books_.list_usage(client.client, message.after_id);
}

proto::client_list_reply request_handler::on_list_clients(client_state& client,
                                                          const proto::list_request& message,
                                                          reply_attachment&) {
  return books_.list_clients(client.client, message.after_id);
}

}  // namespace gpumem::daemon
