// Handlers of locks, barriers and channels: each calls the sync book.
#include "gpumem/shared/sync/layout.hpp"
#include "handlers/request_handler.hpp"

namespace gpumem::daemon {

proto::sync_attach_reply request_handler::on_attach_sync(client_state& client,
                                                         const proto::empty_payload&,
                                                         reply_attachment& attach) {
  const auto attached = books_.sync.attach(client.client);
  attach = {{attached.own_page.fd()}, proto::handle_type::host_memfd};
  return {attached.slot, static_cast<std::uint32_t>(sync::kCellSize), sync::kCellCount,
          attached.own_page.id()};
}

proto::sync_page_reply request_handler::on_get_sync_page(client_state& client,
                                                         const proto::sync_page_request& message,
                                                         reply_attachment& attach) {
  const sync_page& page = books_.sync.page_for(client.client, message.page);
  attach = {{page.fd()}, proto::handle_type::host_memfd};
  return {page.id(), static_cast<std::uint32_t>(sync::kCellSize), sync::kCellCount, 0};
}

namespace {

proto::sync_open_reply reply_of(const sync_book::opened& made, reply_attachment& attach) {
  // The page with the reply spares the client get_sync_page's round trip, which made opening
  // an object on a page it had not mapped cost two.
  if (made.page_to_send != nullptr) {
    attach = {{made.page_to_send->fd()}, proto::handle_type::host_memfd};
  }
  return made.reply;
}

}  // namespace

proto::sync_open_reply request_handler::on_open_sync(client_state& client,
                                                     const proto::sync_open_request& message,
                                                     reply_attachment& attach) {
  return reply_of(books_.sync.open(client.client, message), attach);
}

proto::sync_open_reply request_handler::on_open_channel(client_state& client,
                                                        const proto::channel_open_request& message,
                                                        reply_attachment& attach) {
  return reply_of(books_.sync.open(client.client, message.open, &message.layout), attach);
}

proto::empty_payload request_handler::on_close_sync(client_state& client,
                                                    const proto::sync_close_request& message,
                                                    reply_attachment&) {
  books_.sync.close(client.client, message);
  return {};
}

proto::empty_payload request_handler::on_reset_sync(client_state& client,
                                                    const proto::sync_reset_request& message,
                                                    reply_attachment&) {
  books_.sync.reset(client.client, message);
  return {};
}

proto::sync_list_reply request_handler::on_list_sync(client_state& client,
                                                     const proto::list_request& message,
                                                     reply_attachment&) {
  return books_.sync.list(client.client, message.after_id);
}

proto::signal_page_reply request_handler::on_get_signal_page(
    client_state& client, const proto::signal_page_request& message, reply_attachment& attach) {
  const signal_page& page = books_.sync.signal_page_of(client.client, message.page, message.device);
  attach = {{page.fd()}, proto::handle_type::cuda_posix_fd};
  return {page.size(), message.device, static_cast<std::uint32_t>(sync::kSignalCellSize)};
}

}  // namespace gpumem::daemon
