#include "net/request_handler.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "gpumem/shared/sync/layout.hpp"
#include "request_error.hpp"
#ifdef GPUMEM_WITH_CUDA
#include "gpumem/shared/cuda/driver.hpp"
#endif

namespace gpumem::daemon {

using proto::errc;
using proto::message_type;

void append_error(std::vector<std::byte>& out, std::uint32_t request_id, errc code,
                  std::string_view text) {
  proto::append_frame(out, static_cast<std::uint16_t>(message_type::error), request_id,
                      proto::make_error_reply(code, text));
}

reply_attachment request_handler::handle(client_state& client, const proto::frame_view& frame,
                                         std::vector<std::byte>& out) {
  const auto id = frame.head.request_id;
  reply_attachment attach;
  if (frame.head.fd_count != 0) {
    append_error(out, id, errc::unexpected_handle, "requests carry no file descriptors");
    return attach;
  }
  const auto type = static_cast<message_type>(frame.head.type);
  if (!client.greeted && type != message_type::hello) {
    append_error(out, id, errc::bad_message, "the first request of a session must be hello");
    return attach;
  }
  const std::size_t rollback = out.size();
  try {
    switch (type) {
#define GPUMEM_X(name, number, request, reply, reply_fd_count, summary)                \
  case message_type::name: {                                                           \
    proto::request message{};                                                          \
    if (auto error = proto::decode_payload(frame.payload, message)) {                  \
      throw request_error(static_cast<errc>(error.value()),                            \
                          fmt::format("{} request: {}", #name, error.message()));      \
    }                                                                                  \
    const auto answer = on_##name(client, message, attach);                            \
    proto::append_frame(out, proto::reply_type(type), id, answer,                      \
                        static_cast<std::uint16_t>(attach.fds.size()), attach.handle); \
    return attach;                                                                     \
  }
      GPUMEM_MESSAGE_TABLE(GPUMEM_X)
#undef GPUMEM_X
      default:
        throw request_error(errc::unknown_message_type,
                            fmt::format("message type {:#x} is not a request", frame.head.type));
    }
  } catch (const request_error& error) {
    spdlog::debug("client {}: request {} failed: {}", client.client_id, id, error.what());
    out.resize(rollback);
    append_error(out, id, error.code(), error.what());
#ifdef GPUMEM_WITH_CUDA
  } catch (const cuda::cuda_error& error) {
    spdlog::error("client {}: request {}: {}", client.client_id, id, error.what());
    out.resize(rollback);
    append_error(out, id, errc::cuda_error, error.what());
#endif
  } catch (const std::exception& error) {
    spdlog::error("client {}: request {} failed unexpectedly: {}", client.client_id, id,
                  error.what());
    out.resize(rollback);
    append_error(out, id, errc::internal, error.what());
  }
  return {};
}

proto::hello_reply request_handler::on_hello(client_state& client,
                                             const proto::hello_request& message,
                                             reply_attachment&) {
  if (client.greeted) throw request_error(errc::bad_message, "hello was already sent");
  client.greeted = true;
  books_.set_label(client.client_id, std::string(message.client_label.view()));
  return {client.client_id, static_cast<std::uint32_t>(books_.pool_count()), proto::kMaxPayloadSize,
          static_cast<std::uint32_t>(::getpid()), 0};
}

proto::empty_payload request_handler::on_ping(client_state&, const proto::empty_payload&,
                                              reply_attachment&) {
  return {};
}

proto::pool_reply request_handler::on_get_pool(client_state&,
                                               const proto::get_pool_request& message,
                                               reply_attachment& attach) {
  const pool& found = books_.find_pool(message.pool_id);
  attach = {{found.shareable_fd()}, found.handle_kind()};
  proto::pool_reply reply{};
  reply.pool_id = found.id();
  reply.device = found.config().device;
  reply.size_limit = found.config().size;
  (void)proto::make_wire_name(found.config().name, reply.name);
  found.describe_pool(reply);
  return reply;
}

proto::allocation_reply request_handler::on_allocate(client_state& client,
                                                     const proto::allocate_request& message,
                                                     reply_attachment&) {
  return books_.allocate(client.client_id, message);
}

proto::allocation_reply request_handler::on_open(client_state& client,
                                                 const proto::open_request& message,
                                                 reply_attachment&) {
  return books_.open(client.client_id, message);
}

proto::empty_payload request_handler::on_release(client_state& client,
                                                 const proto::release_request& message,
                                                 reply_attachment&) {
  books_.release(client.client_id, message);
  return {};
}

proto::stats_reply request_handler::on_stats(client_state&, const proto::empty_payload&,
                                             reply_attachment&) {
  return books_.stats();
}

proto::client_list_reply request_handler::on_list_clients(client_state&,
                                                          const proto::list_request& message,
                                                          reply_attachment&) {
  return books_.list_clients(message.after_id);
}

proto::allocation_list_reply request_handler::on_list_allocations(
    client_state&, const proto::list_request& message, reply_attachment&) {
  return books_.list_allocations(message.after_id);
}

}  // namespace gpumem::daemon

namespace gpumem::daemon {

proto::reservation_reply request_handler::on_reserve(client_state& client,
                                                     const proto::reserve_request& message,
                                                     reply_attachment&) {
  return books_.reserve(client.client_id, message);
}

proto::reservation_reply request_handler::on_open_reservation(client_state& client,
                                                              const proto::open_request& message,
                                                              reply_attachment&) {
  return books_.open_reservation(client.client_id, message);
}

proto::reservation_reply request_handler::on_resize_reservation(
    client_state& client, const proto::resize_request& message, reply_attachment&) {
  return books_.resize_reservation(client.client_id, message);
}

proto::chunks_reply request_handler::on_get_chunks(client_state& client,
                                                   const proto::chunks_request& message,
                                                   reply_attachment& attach) {
  auto reply = books_.chunks(client.client_id, message, attach.fds);
  if (!attach.fds.empty()) attach.handle = proto::handle_type::cuda_posix_fd;
  return reply;
}

proto::empty_payload request_handler::on_release_reservation(
    client_state& client, const proto::reservation_release_request& message, reply_attachment&) {
  books_.release_reservation(client.client_id, message.reservation_id);
  return {};
}

proto::reservation_list_reply request_handler::on_list_reservations(
    client_state&, const proto::list_request& message, reply_attachment&) {
  return books_.list_reservations(message.after_id);
}

}  // namespace gpumem::daemon

namespace gpumem::daemon {

proto::sync_attach_reply request_handler::on_attach_sync(client_state& client,
                                                         const proto::empty_payload&,
                                                         reply_attachment& attach) {
  const std::uint16_t slot =
      books_.sync().attach(client.client_id, books_.pid_of(client.client_id));
  attach = {{books_.sync().host_page_fd()}, proto::handle_type::host_memfd};
  return {slot, static_cast<std::uint32_t>(sync::kCellSize), sync::kCellCount, 0};
}

proto::sync_open_reply request_handler::on_open_sync(client_state& client,
                                                     const proto::sync_open_request& message,
                                                     reply_attachment&) {
  return books_.sync().open(client.client_id, message);
}

proto::empty_payload request_handler::on_close_sync(client_state& client,
                                                    const proto::sync_close_request& message,
                                                    reply_attachment&) {
  books_.sync().close(client.client_id, message);
  return {};
}

proto::empty_payload request_handler::on_reset_sync(client_state&,
                                                    const proto::sync_reset_request& message,
                                                    reply_attachment&) {
  books_.sync().reset(message);
  return {};
}

proto::sync_list_reply request_handler::on_list_sync(client_state&,
                                                     const proto::list_request& message,
                                                     reply_attachment&) {
  return books_.sync().list(message.after_id);
}

proto::signal_page_reply request_handler::on_get_signal_page(
    client_state&, const proto::signal_page_request& message, reply_attachment& attach) {
  const signal_page& page = books_.sync().signal_page_of(message.device);
  attach = {{page.fd()}, proto::handle_type::cuda_posix_fd};
  return {page.size(), message.device, static_cast<std::uint32_t>(sync::kSignalCellSize)};
}

}  // namespace gpumem::daemon
