#pragma once
/// @file
/// @brief The processes of clients a restarted daemon re-adopted (daemon/restart/), watched
/// through the pidfds systemd kept: when one exits and no session serves its client (it never
/// reconnected, or its new session has ended), what it held is let go, exactly as if the
/// daemon had never restarted.

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "books.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "net/asio.hpp"

namespace gpumem::daemon {

class adopted_processes {
 public:
  /// @param removed called after a client was removed (the server settles lock clean-ups).
  adopted_processes(boost::asio::io_context& io, books& state, std::function<void()> removed);

  void watch(std::vector<std::pair<client_id, unique_fd>> processes);

 private:
  struct watched {
    client_id client;
    boost::asio::posix::stream_descriptor pidfd;
  };
  void wait(const std::shared_ptr<watched>& each);
  void exited(client_id client);

  boost::asio::io_context& io_;
  books& books_;
  std::function<void()> removed_;
};

}  // namespace gpumem::daemon
