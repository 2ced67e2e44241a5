#pragma once
// gpumemd as an earlier release of it would show itself: a proxy on a socket of its own that
// passes every byte and descriptor between each client and the real daemon, and clears some
// feature bits in the hello's reply, so that the client falls back to what such a daemon had.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::testing {

class feature_hiding_proxy {
 public:
  /// @brief Listens at a socket in a new temporary folder and serves until destroyed.
  /// @param hidden the proto::kFeature* bits cleared in every connection's hello reply.
  feature_hiding_proxy(std::string daemon_socket, std::uint32_t hidden);
  ~feature_hiding_proxy();
  feature_hiding_proxy(const feature_hiding_proxy&) = delete;
  feature_hiding_proxy& operator=(const feature_hiding_proxy&) = delete;

  /// Where clients connect instead of the daemon's socket.
  const std::string& socket_path() const noexcept { return socket_path_; }
  /// Bytes the clients sent on their sockets so far: requests that took another way (the
  /// mailbox) do not count.
  std::size_t bytes_from_clients() const noexcept { return from_clients_.load(); }

 private:
  void serve();

  std::string daemon_socket_;
  std::uint32_t hidden_;
  std::atomic<std::size_t> from_clients_{0};
  std::string folder_;
  std::string socket_path_;
  unique_fd listener_;
  unique_fd stop_read_;
  unique_fd stop_write_;
  std::thread server_;
};

}  // namespace gpumem::testing
