// Handlers of pools and allocations: each calls the memory book.
#include <cstring>

#include "handlers/request_handler.hpp"

namespace gpumem::daemon {

proto::pool_reply request_handler::on_get_pool(client_state& client,
                                               const proto::get_pool_request& message,
                                               reply_attachment& attach) {
  const auto [instance, fd] = books_.memory.pool_for(client.client, message.pool_id);
  const pool& found = *instance;
  attach = {{fd},
            found.is_device_memory() ? proto::handle_type::cuda_posix_fd
                                     : proto::handle_type::host_memfd};
  proto::pool_reply reply{};
  reply.pool_id = found.id();
  reply.device = found.config().device;
  reply.size_limit = found.config().size;
  (void)proto::make_wire_name(found.config().name, reply.name);
  if (const auto ready = found.ready_event(); ready && books_.memory.shares_events(client.client)) {
    static_assert(sizeof(reply.ready_event) == sizeof(*ready));
    std::memcpy(reply.ready_event, ready->data(), sizeof(reply.ready_event));
  }
  return reply;
}

proto::allocation_reply request_handler::on_allocate(client_state& client,
                                                     const proto::allocate_request& message,
                                                     reply_attachment&) {
  return books_.memory.allocate(client.client, message);
}

proto::allocation_reply request_handler::on_open(client_state& client,
                                                 const proto::open_request& message,
                                                 reply_attachment&) {
  return books_.memory.open(client.client, message);
}

proto::empty_payload request_handler::on_release(client_state& client,
                                                 const proto::release_request& message,
                                                 reply_attachment&) {
  books_.memory.release(client.client, message);
  return {};
}

proto::allocation_list_reply request_handler::on_list_allocations(
    client_state& client, const proto::list_request& message, reply_attachment&) {
  return books_.memory.list_allocations(client.client, message.after_id);
}

}  // namespace gpumem::daemon
