#include "support/feature_hiding_proxy.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <list>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "gpumem/proto/messages.hpp"
#include "gpumem/proto/wire.hpp"
#include "gpumem/shared/fd_passing.hpp"
#include "support/temporary_folder.hpp"
#include "support/unix_address.hpp"

namespace gpumem::testing {
namespace {

/// Where the features word lies in what the daemon sends on a connection: in the payload of its
/// first frame, the hello's reply.
constexpr std::size_t kFeaturesAt = sizeof(proto::header) + offsetof(proto::hello_reply, features);

unique_fd unix_socket() {
  unique_fd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!socket) throw std::system_error(errno, std::generic_category(), "socket");
  return socket;
}

/// One client's connection and the proxy's to the daemon for it.
struct relayed_connection {
  unique_fd client;
  unique_fd daemon;
  std::size_t from_daemon = 0;  ///< bytes the daemon sent so far
};

/// @brief Passes what one read of @p from gives, descriptors included, on to @p to, and counts
/// the bytes in @p sent_so_far; from the daemon, clears @p hidden in the features word when it
/// is among them.
/// @return false once either side closed or failed.
bool relay_once(int from, int to, std::size_t& sent_so_far, bool from_daemon,
                std::uint32_t hidden) {
  std::array<std::byte, 65536> buffer;
  std::vector<unique_fd> fds;
  std::error_code error;
  const std::size_t got = recv_with_fds(from, buffer, fds, error);
  if (error || got == 0) return false;
  // Byte by byte: a read can end inside the word. The wire is little-endian.
  for (std::size_t i = 0; from_daemon && i < sizeof(std::uint32_t); ++i) {
    const std::size_t at = kFeaturesAt + i;
    if (at >= sent_so_far && at < sent_so_far + got) {
      buffer[at - sent_so_far] &= static_cast<std::byte>(~(hidden >> (8 * i)) & 0xffu);
    }
  }
  sent_so_far += got;
  std::vector<int> raw_fds;
  for (const auto& fd : fds) raw_fds.push_back(fd.get());
  std::size_t done = 0;
  while (done < got) {  // the descriptors go with the first byte; blocking sockets
    const std::span<const int> attached =
        done == 0 ? std::span<const int>(raw_fds) : std::span<const int>();
    done += send_with_fds(to, std::span(buffer).subspan(done, got - done), attached, error);
    if (error) return false;
  }
  return true;
}

}  // namespace

feature_hiding_proxy::feature_hiding_proxy(std::string daemon_socket, std::uint32_t hidden)
    : daemon_socket_(std::move(daemon_socket)),
      hidden_(hidden),
      folder_(make_temporary_folder("proxy")),
      socket_path_(folder_ + "/gpumemd.sock"),
      listener_(unix_socket()) {
  const sockaddr_un address = unix_address(socket_path_);
  if (::bind(listener_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener_.get(), 64) != 0) {
    throw std::system_error(errno, std::generic_category(), "listen at " + socket_path_);
  }
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category());
  stop_read_ = unique_fd(ends[0]);
  stop_write_ = unique_fd(ends[1]);
  server_ = std::thread([this] { serve(); });
}

feature_hiding_proxy::~feature_hiding_proxy() {
  [[maybe_unused]] const auto written = ::write(stop_write_.get(), "x", 1);
  server_.join();
  std::error_code ignored;
  std::filesystem::remove_all(folder_, ignored);
}

void feature_hiding_proxy::serve() {
  std::list<relayed_connection> connections;
  for (;;) {
    std::vector<pollfd> watched{{stop_read_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    for (const auto& each : connections) {
      watched.push_back({each.client.get(), POLLIN, 0});
      watched.push_back({each.daemon.get(), POLLIN, 0});
    }
    if (::poll(watched.data(), watched.size(), -1) < 0) continue;  // EINTR
    if (watched[0].revents != 0) return;
    auto polled = watched.begin() + 2;
    for (auto each = connections.begin(); each != connections.end(); polled += 2) {
      std::size_t from_client = from_clients_.load();
      const bool client_open =
          polled[0].revents == 0 ||
          relay_once(each->client.get(), each->daemon.get(), from_client, false, hidden_);
      from_clients_.store(from_client);
      const bool daemon_open =
          polled[1].revents == 0 ||
          relay_once(each->daemon.get(), each->client.get(), each->from_daemon, true, hidden_);
      each = client_open && daemon_open ? std::next(each) : connections.erase(each);
    }
    // After the relays: a connection accepted now has no entry in this round's poll.
    if (watched[1].revents != 0) {
      unique_fd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      unique_fd daemon = unix_socket();
      const sockaddr_un address = unix_address(daemon_socket_);
      // A client the daemon does not take is closed, as the daemon would close it.
      if (client && ::connect(daemon.get(), reinterpret_cast<const sockaddr*>(&address),
                              sizeof address) == 0) {
        connections.push_back({std::move(client), std::move(daemon)});
      }
    }
  }
}

}  // namespace gpumem::testing
