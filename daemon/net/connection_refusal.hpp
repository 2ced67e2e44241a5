#pragma once
/// @file
/// @brief A connection gpumemd will not serve (it has max_connections open) is told why: the
/// client's hello gets an error reply naming the rule before the socket closes. A socket closed
/// unanswered reads to the client as a daemon that is not running (gpumemctl's exit 3).

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "gpumem/proto/errc.hpp"
#include "net/asio.hpp"

namespace gpumem::daemon {

class connection_refusal {
 public:
  using socket = boost::asio::local::stream_protocol::socket;

  explicit connection_refusal(boost::asio::io_context& io) : io_(io) {}

  /// @brief Answers @p connection's hello with @p code and @p reason, then closes it. The loop
  /// never waits on it: the hello is awaited at most kHelloWait, and while kMostAtOnce are being
  /// answered, another connection is closed at once.
  void refuse(socket connection, proto::errc code, std::string reason);

 private:
  static constexpr std::size_t kMostAtOnce = 16;
  static constexpr std::chrono::milliseconds kHelloWait{1000};
  /// A hello is a few hundred bytes: a larger frame is no hello, and gets no answer.
  static constexpr std::uint32_t kLargestHello = 4096;

  /// Gives its place back when a refusal ends, however it ends. A member type, not a local one:
  /// the coroutine's frame holds it, and a frame may not hold a type without linkage.
  struct answering_slot {
    std::shared_ptr<std::size_t> count;
    ~answering_slot() { --*count; }
  };

  /// Static, and sharing the count: a refusal may outlive this object when the io_context
  /// outlives the server, and then touches neither.
  static boost::asio::awaitable<void> answer(std::shared_ptr<socket> connection,
                                             std::shared_ptr<std::size_t> answering,
                                             proto::errc code, std::string reason);

  boost::asio::io_context& io_;
  std::shared_ptr<std::size_t> answering_ = std::make_shared<std::size_t>(0);
};

}  // namespace gpumem::daemon
