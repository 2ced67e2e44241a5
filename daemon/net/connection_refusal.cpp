#include "net/connection_refusal.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <cstddef>
#include <utility>
#include <vector>

#include "gpumem/proto/codec.hpp"
#include "gpumem/proto/messages.hpp"
#include "gpumem/proto/wire.hpp"

namespace gpumem::daemon {

namespace asio = boost::asio;

connection_refusal::answering_slot::~answering_slot() {
  if (!counts) return;  // moved into the coroutine
  --counts->all;
  const auto of_uid = counts->of_uid.find(uid);
  if (--of_uid->second == 0) counts->of_uid.erase(of_uid);
}

void connection_refusal::refuse(socket connection, uid_t uid, proto::errc code,
                                std::string reason) {
  if (answering_->all >= kMostAtOnce) return;  // the socket closes here, unanswered
  std::size_t& of_uid = answering_->of_uid[uid];
  if (of_uid >= kMostOfAUid) return;
  // Counted before the spawn: a spawn that throws gives the place back with the slot.
  ++answering_->all;
  ++of_uid;
  answering_slot counted{answering_, uid};
  auto shared = std::make_shared<socket>(std::move(connection));
  asio::co_spawn(io_, answer(std::move(shared), std::move(counted), code, std::move(reason)),
                 asio::detached);
}

asio::awaitable<void> connection_refusal::answer(std::shared_ptr<socket> connection,
                                                 [[maybe_unused]] answering_slot counted,
                                                 proto::errc code, std::string reason) {
  // counted lives in the coroutine's frame: its place is given back when the frame goes.
  // A client that sends no hello in time is closed: the timer owns a reference to the socket,
  // so it may fire after this coroutine has ended.
  asio::steady_timer deadline(co_await asio::this_coro::executor, kHelloWait);
  deadline.async_wait([connection](const boost::system::error_code& error) {
    boost::system::error_code ignored;
    if (!error) connection->close(ignored);
  });
  boost::system::error_code error;
  proto::header head{};
  co_await asio::async_read(*connection, asio::buffer(&head, sizeof head),
                            asio::redirect_error(asio::use_awaitable, error));
  if (!error && head.magic == proto::kMagic &&
      head.type == static_cast<std::uint16_t>(proto::message_type::hello) &&
      head.payload_size <= kLargestHello) {
    // Read to its end, so that the close leaves nothing unread: a socket closed with bytes
    // unread resets the client's end, which may then see the reset instead of the answer.
    std::vector<std::byte> payload(head.payload_size);
    co_await asio::async_read(*connection, asio::buffer(payload),
                              asio::redirect_error(asio::use_awaitable, error));
    if (!error) {
      std::vector<std::byte> reply;
      proto::append_frame(reply, static_cast<std::uint16_t>(proto::message_type::error),
                          head.request_id, proto::make_error_reply(code, reason));
      co_await asio::async_write(*connection, asio::buffer(reply),
                                 asio::redirect_error(asio::use_awaitable, error));
    }
  }
  deadline.cancel();
  boost::system::error_code ignored;
  connection->close(ignored);
}

}  // namespace gpumem::daemon
