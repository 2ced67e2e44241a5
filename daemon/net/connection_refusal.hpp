#pragma once
/// @file
/// @brief A connection gpumemd will not serve (a rule of access, its uid's connection quota,
/// max_connections) is told why: the client's hello gets an error reply naming the rule before
/// the socket closes. A socket closed unanswered reads to the client as a daemon that is not
/// running (gpumemctl's exit 3).

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "gpumem/proto/errc.hpp"
#include "net/asio.hpp"

namespace gpumem::daemon {

class connection_refusal {
 public:
  using socket = boost::asio::local::stream_protocol::socket;

  explicit connection_refusal(boost::asio::io_context& io) : io_(io) {}

  /// @brief Answers the hello of @p connection, of uid @p uid, with @p code and @p reason, then
  /// closes it. The loop never waits on it: the hello is awaited at most kHelloWait. While
  /// kMostAtOnce are being answered, or kMostOfAUid of @p uid's, the connection is closed at
  /// once: a uid that keeps refused connections open, saying nothing, keeps only its own
  /// refusals unanswered.
  void refuse(socket connection, uid_t uid, proto::errc code, std::string reason);

 private:
  /// A uid's share is what all refusals had before there were shares: a node of one service
  /// user is answered as before, and it takes four uids to fill the whole.
  static constexpr std::size_t kMostAtOnce = 64;
  static constexpr std::size_t kMostOfAUid = 16;
  static constexpr std::chrono::milliseconds kHelloWait{1000};
  /// A hello is a few hundred bytes: a larger frame is no hello, and gets no answer.
  static constexpr std::uint32_t kLargestHello = 4096;

  /// The refusals being answered, in all and by uid.
  struct answering {
    std::size_t all = 0;
    std::map<uid_t, std::size_t> of_uid;
  };

  /// Gives its place back when a refusal ends, however it ends. A member type, not a local one:
  /// the coroutine's frame holds it, and a frame may not hold a type without linkage.
  struct answering_slot {
    answering_slot(std::shared_ptr<answering> taken, uid_t of)
        : counts(std::move(taken)), uid(of) {}
    answering_slot(answering_slot&&) noexcept = default;  ///< leaves the moved one counting none
    answering_slot& operator=(answering_slot&&) = delete;
    ~answering_slot();

    std::shared_ptr<answering> counts;
    uid_t uid;
  };

  /// Static, and sharing the counts: a refusal may outlive this object when the io_context
  /// outlives the server, and then touches neither.
  static boost::asio::awaitable<void> answer(std::shared_ptr<socket> connection,
                                             answering_slot counted, proto::errc code,
                                             std::string reason);

  boost::asio::io_context& io_;
  std::shared_ptr<answering> answering_ = std::make_shared<answering>();
};

}  // namespace gpumem::daemon
