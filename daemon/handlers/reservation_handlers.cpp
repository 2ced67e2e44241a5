// Handlers of reservations: each calls the reservation book.
#include "handlers/request_handler.hpp"

namespace gpumem::daemon {

namespace {
proto::handle_type chunk_handle_type(std::int32_t device) {
  return device == proto::kHostDevice ? proto::handle_type::host_memfd
                                      : proto::handle_type::cuda_posix_fd;
}
}  // namespace

proto::reservation_reply request_handler::on_reserve(client_state& client,
                                                     const proto::reserve_request& message,
                                                     reply_attachment& attach) {
  const proto::reservation_reply reply = books_.reservations.reserve(client.client, message);
  attach = {{books_.reservations.notice_fd(reply.reservation_id)}, proto::handle_type::host_memfd};
  return reply;
}

proto::reservation_reply request_handler::on_open_reservation(client_state& client,
                                                              const proto::open_request& message,
                                                              reply_attachment& attach) {
  const proto::reservation_reply reply = books_.reservations.open(client.client, message);
  attach = {{books_.reservations.notice_fd(reply.reservation_id)}, proto::handle_type::host_memfd};
  return reply;
}

proto::reservation_reply request_handler::on_resize_reservation(
    client_state& client, const proto::resize_request& message, reply_attachment&) {
  return books_.reservations.resize(client.client, message);
}

proto::chunks_reply request_handler::on_get_chunks(client_state& client,
                                                   const proto::chunks_request& message,
                                                   reply_attachment& attach) {
  auto reply = books_.reservations.chunks(client.client, message, attach.fds);
  if (!attach.fds.empty()) {
    attach.handle = chunk_handle_type(books_.reservations.find(message.reservation_id)->device());
  }
  return reply;
}

proto::empty_payload request_handler::on_release_reservation(
    client_state& client, const proto::reservation_release_request& message, reply_attachment&) {
  books_.reservations.release(client.client, message.reservation_id);
  return {};
}

proto::reservation_list_reply request_handler::on_list_reservations(
    client_state& client, const proto::list_request& message, reply_attachment&) {
  return books_.reservations.list(client.client, message.after_id);
}

proto::reservation_reply request_handler::on_begin_version(
    client_state& client, const proto::begin_version_request& message, reply_attachment&) {
  return books_.reservations.begin_version(client.client, message);
}

proto::reservation_reply request_handler::on_commit_version(client_state& client,
                                                            const proto::version_request& message,
                                                            reply_attachment&) {
  return books_.reservations.commit_version(client.client, message);
}

proto::empty_payload request_handler::on_abandon_version(client_state& client,
                                                         const proto::version_request& message,
                                                         reply_attachment&) {
  books_.reservations.abandon_version(client.client, message);
  return {};
}

proto::empty_payload request_handler::on_quiesce_reservation(
    client_state& client, const proto::reservation_release_request& message, reply_attachment&) {
  books_.reservations.quiesce(client.client, message.reservation_id);
  return {};
}

proto::reservation_status request_handler::on_sleep_reservation(client_state& client,
                                                                const proto::sleep_request& message,
                                                                reply_attachment&) {
  return books_.reservations.sleep(client.client, message);
}

proto::reservation_status request_handler::on_wake_reservation(
    client_state& client, const proto::reservation_target& message, reply_attachment&) {
  return books_.reservations.wake(client.client, message);
}

proto::reservation_status request_handler::on_get_reservation_status(
    client_state& client, const proto::reservation_target& message, reply_attachment&) {
  return books_.reservations.status(client.client, message);
}

}  // namespace gpumem::daemon
