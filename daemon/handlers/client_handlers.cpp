// Handlers of the session itself, statistics and the client list.
#include <unistd.h>

#include "handlers/request_handler.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;

proto::hello_reply request_handler::on_hello(client_state& client,
                                             const proto::hello_request& message,
                                             reply_attachment&) {
  if (client.greeted) throw request_error(errc::bad_message, "hello was already sent");
  books_.rows.set_label(client.client, std::string(message.client_label.view()));
  try {
    books_.check_connection(client.client);
  } catch (const request_error&) {
    client.refused = true;  // the dispatch logs the refusal
    throw;
  }
  client.greeted = true;
  return {client.client, static_cast<std::uint32_t>(books_.memory.pool_count()),
          proto::kMaxPayloadSize, static_cast<std::uint32_t>(::getpid()), 0};
}

proto::empty_payload request_handler::on_ping(client_state&, const proto::empty_payload&,
                                              reply_attachment&) {
  return {};
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
