#pragma once
// A notification socket of the test, with $NOTIFY_SOCKET pointing at it while it lives: what
// the daemon's side of sd_notify(3) sends to systemd, received in the test's own process.

#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "gpumem/shared/unique_fd.hpp"
#include "notification.hpp"

namespace gpumem::testing {

class notify_receiver {
 public:
  /// @param name made unique with the process id: an abstract socket name, as systemd's own
  /// notification socket may be ("@...").
  explicit notify_receiver(const std::string& name) {
    socket_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const std::string abstract = name + "-" + std::to_string(::getpid());
    std::memcpy(address.sun_path + 1, abstract.data(), abstract.size());
    const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract.size());
    EXPECT_EQ(::bind(socket_.get(), reinterpret_cast<sockaddr*>(&address), size), 0);
    const int on = 1;
    ::setsockopt(socket_.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
    ::setenv("NOTIFY_SOCKET", ("@" + abstract).c_str(), 1);
  }
  ~notify_receiver() { ::unsetenv("NOTIFY_SOCKET"); }
  notify_receiver(const notify_receiver&) = delete;
  notify_receiver& operator=(const notify_receiver&) = delete;

  using message = notification;

  /// @brief The next message, waiting for it at most @p within; an empty one when none came.
  message receive(std::chrono::milliseconds within = std::chrono::seconds(5)) {
    pollfd ready{socket_.get(), POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(within.count())) != 1) return {};
    return read_notification(socket_.get()).value_or(message{});
  }

 private:
  unique_fd socket_;
};

}  // namespace gpumem::testing
