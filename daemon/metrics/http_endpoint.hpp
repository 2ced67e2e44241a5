#pragma once
/// @file
/// @brief GET /metrics over HTTP (config metrics_listen), served by prometheus-cpp's threads.
///
/// The books belong to the loop, which is single-threaded (Asio without threads): the HTTP
/// threads never read them. A scrape asks the loop for a snapshot through a loop_wakeup and waits
/// for it a moment; the loop collects it when it gets to it, converts it and publishes it under
/// a mutex it holds only to swap a pointer, so a scrape never makes the loop wait, and a loop
/// busy for longer than kFreshness serves the scrape the snapshot before. Every uid's and
/// label's series are served: whoever reaches the address is trusted as an operator.
/// Built only with prometheus-cpp (GPUMEM_WITH_PROMETHEUS).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "books.hpp"
#include "net/asio.hpp"
#include "net/loop_wakeup.hpp"

namespace prometheus {
class Exposer;
}

namespace gpumem::daemon::metrics {

class http_endpoint {
 public:
  /// How long a scrape waits for the loop's fresh snapshot before it takes the last one.
  static constexpr auto kFreshness = std::chrono::milliseconds(500);

  /// @brief Listens on @p address ("HOST:PORT"; port 0: one the kernel picks) at once.
  /// @throws std::runtime_error naming the address when it cannot listen there.
  http_endpoint(boost::asio::io_context& io, const std::string& address, const books& state);
  /// Stops serving: waits for the scrapes under way, which stop waiting for the loop.
  ~http_endpoint();
  http_endpoint(const http_endpoint&) = delete;
  http_endpoint& operator=(const http_endpoint&) = delete;

  /// @brief The port it listens on.
  std::uint16_t port() const;

 private:
  struct exchange;
  class collector;

  void publish();

  const books& state_;
  std::shared_ptr<exchange> exchange_;
  loop_wakeup requests_;
  std::shared_ptr<collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;  ///< last: its threads use the members above
};

}  // namespace gpumem::daemon::metrics
