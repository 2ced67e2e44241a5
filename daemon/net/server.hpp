#pragma once
/// @file
/// @brief daemon/net/: the daemon's edge to the world. The server owns the listening socket,
/// the signal handling and the live sessions; a session reads a client's frames, hands each to
/// the request handler and writes the replies with their descriptors, and ends when the
/// client's process exits (pidfd) or its socket closes; peer_process finds who is on the other
/// end. Under systemd the server takes its listening socket from the socket unit, tells systemd
/// it is ready and pings its watchdog (daemon/systemd/). Nothing here keeps books.
/// May include: proto/ and shared/ headers, daemon/handlers/, daemon/books.hpp (and what it
/// includes), daemon/config/, daemon/systemd/. Nothing includes daemon/net/ but main.cpp.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "config/config.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "handlers/request_handler.hpp"
#include "net/adopted_processes.hpp"
#include "net/asio.hpp"
#include "net/client_poller.hpp"
#include "net/connection_refusal.hpp"
#include "net/session.hpp"
#include "net/worker_thread.hpp"
#include "rate_limited_log.hpp"

namespace gpumem::daemon {

class server {
 public:
  /// Reads the configuration again, for a reload: the file and the command line's overrides,
  /// its pools resolved. @throws config_error naming the file, the key and the problem.
  using config_reader = std::function<daemon_config()>;

  /// @brief Serves on @p passed_listener when given: a listening Unix stream socket passed by
  /// systemd's socket unit, whose file the server neither makes nor removes, so that clients
  /// wait in its backlog while the daemon restarts. Otherwise binds the configured socket
  /// (creating its folder) and refuses to start if another daemon answers on it, or if the
  /// folder belongs to another uid or others may write to it; a stale socket file is replaced.
  /// @param config the configuration in force, which a reload (SIGHUP, through @p reread)
  /// changes in place: sessions read it as it is at each use.
  /// @throws std::runtime_error naming the path (or the passed fd), the cause and the fix.
  server(boost::asio::io_context& io, daemon_config& config, books& state,
         unique_fd passed_listener = {}, config_reader reread = {});
  ~server();

  /// @brief Accepts clients until SIGINT, SIGTERM or SIGQUIT, then ends every session and
  /// returns. Under a systemd watchdog ($WATCHDOG_USEC), pings it from this loop every half
  /// interval, so that a wedged loop gets the daemon restarted. SIGHUP reloads the configuration
  /// (config/reload_plan.hpp says what changes live), telling systemd with RELOADING=1 and
  /// READY=1; SIGUSR1 logs a stats line; SIGPIPE is ignored by the caller (main).
  void run();

  const std::string& socket_path() const noexcept { return socket_path_; }

  /// @brief Watches clients re-adopted from a previous daemon (daemon/restart/) until their
  /// processes exit.
  void watch_adopted(std::vector<std::pair<client_id, unique_fd>> processes) {
    adopted_.watch(std::move(processes));
  }

 private:
  void bind_socket(const daemon_config& config);
  void adopt_socket(unique_fd listener);
  boost::asio::awaitable<void> accept_loop();
  boost::asio::awaitable<void> watchdog_loop(std::chrono::microseconds interval);
  /// Starts a session for @p socket, or closes it at once when max_connections are open.
  void admit(boost::asio::local::stream_protocol::socket socket);
  void wait_for_signal();
  void on_signal(int signal);
  void log_stats() const;
  /// Reads the configuration again and applies what can change live; a configuration that
  /// cannot be read changes nothing.
  void reload();
  /// Applies a reload's new socket mode to the socket file, when it is this daemon's.
  /// @return false, having said why at warning, when the mode stays as it was.
  bool apply_socket_mode(mode_t mode);
  /// After a session ended: retries, until none is left, the clean-ups after deaths that found
  /// a lock hand-off in flight. Runs only while there are some.
  void settle_pending();
  boost::asio::awaitable<void> settle_loop();
  void shut_down(const char* why);

  boost::asio::io_context& io_;
  daemon_config& config_;
  config_reader reread_;
  books& books_;
  request_handler handler_;
  std::string socket_path_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer settle_timer_;
  boost::asio::steady_timer watchdog_timer_;
  /// Accepting pauses on it when the process is out of descriptors.
  boost::asio::steady_timer accept_pause_;
  rate_limited_log accept_log_;
  rate_limited_log refusal_log_;  ///< connections refused as they are accepted
  connection_refusal refusal_;    ///< tells them why
  bool settling_ = false;
  /// False when systemd's socket unit made the socket file: it must outlive this daemon.
  bool owns_socket_file_ = true;
  client_poller poller_;  ///< before the sessions, which it serves
  std::unordered_map<session*, std::shared_ptr<session>> sessions_;
  adopted_processes adopted_;
  /// Copies of sleep and wake; joined before the books it reports to can go.
  worker_thread worker_;
};

}  // namespace gpumem::daemon
