// Handlers of what operators watch: the metrics and the event stream.
#include <fmt/format.h>

#include <algorithm>

#include "handlers/request_handler.hpp"
#include "metrics/collect.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;

proto::event_record request_handler::on_subscribe_events(client_state& client,
                                                         const proto::empty_payload&,
                                                         reply_attachment&) {
  if (books_.events.subscribed(client.client)) {
    throw request_error(errc::invalid_argument, "this connection streams events already");
  }
  const credentials& who = books_.rows.client(client.client).who;
  proto::event_record subscribed =
      books_.events.subscribe(client.client, who.uid, books_.access.is_admin(who));
  try {
    books_.rows.set_streams_events(client.client);
  } catch (...) {
    books_.events.unsubscribe(client.client);  // answered with an error: no stream
    throw;
  }
  client.subscribing = true;
  return subscribed;
}

proto::metrics_reply request_handler::on_get_metrics(client_state& client,
                                                     const proto::metrics_request& message,
                                                     reply_attachment&) {
  if (message.snapshot == 0) {
    const credentials& who = books_.rows.client(client.client).who;
    client.metrics_text = metrics::render_text(
        metrics::collect(books_, {.every_uid = books_.access.is_admin(who), .uid = who.uid}));
    client.metrics_snapshot = ++last_metrics_snapshot_;
  } else if (message.snapshot != client.metrics_snapshot) {
    throw request_error(errc::wrong_state,
                        fmt::format("metrics snapshot {} is no longer kept: ask again from the "
                                    "start (snapshot 0)",
                                    message.snapshot));
  }
  const std::string& text = client.metrics_text;
  if (message.offset > text.size()) {
    throw request_error(errc::invalid_argument,
                        fmt::format("offset {} is beyond the {} bytes of metrics snapshot {}",
                                    message.offset, text.size(), client.metrics_snapshot));
  }
  proto::metrics_reply reply;
  const std::size_t count =
      std::min(proto::metrics_reply::kMaxRecords, text.size() - message.offset);
  reply.records.assign(text.begin() + message.offset, text.begin() + message.offset + count);
  reply.head = {client.metrics_snapshot, static_cast<std::uint32_t>(text.size()), message.offset,
                static_cast<std::uint32_t>(count), message.offset + count < text.size() ? 1u : 0u};
  if (reply.head.more == 0) {
    // Read to the end: the text is not kept for a session that may never ask again.
    std::string().swap(client.metrics_text);
    client.metrics_snapshot = 0;
  }
  return reply;
}

}  // namespace gpumem::daemon
