#pragma once
// Plays systemd for tests (none runs here): starts gpumemd as a Type=notify service with
// NotifyAccess=main, socket activation and the fd store, and restarts it the way systemd does.
//
// It owns the notification socket ($NOTIFY_SOCKET, SO_PASSCRED) and a thread that handles
// every message of the daemon's main process: READY=1, STATUS=, WATCHDOG=1, FDSTORE=1 and
// FDSTOREREMOVE=1 with FDNAME=, BARRIER=1; the rest is ignored, and so is every message of
// another process. It owns the listening socket too (socket_activation), so clients that
// connect while the daemon is down wait in its backlog. A start passes the listening socket
// ("listen") and the stored fds from fd 3 on with $LISTEN_PID, $LISTEN_FDS and $LISTEN_FDNAMES.
// Documented in sd_notify(3), sd_listen_fds(3) and systemd.service(5).

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::testing {

class systemd_supervisor {
 public:
  struct options {
    std::vector<std::string>
        args{};                      // gpumemd's arguments (the binary is testing::daemon_binary())
    std::vector<std::string> env{};  // extra KEY=VALUE
    bool socket_activation =
        true;  // the supervisor binds and listens on socket_path and passes it as "listen"
    std::chrono::microseconds watchdog{0};  // sets WATCHDOG_USEC when nonzero
    std::size_t fd_store_max = 16384;
    std::string binary{};  // another program than gpumemd, started with args alone (no --socket)
  };

  /// @brief Makes a fresh temporary folder, which holds socket_path(), the notification socket
  /// and the daemon's log; binds and listens on socket_path() with socket_activation.
  explicit systemd_supervisor(options);
  ~systemd_supervisor();  // kills the daemon (SIGKILL) and closes everything
  systemd_supervisor(const systemd_supervisor&) = delete;
  systemd_supervisor& operator=(const systemd_supervisor&) = delete;

  /// @brief Spawns the daemon with $NOTIFY_SOCKET, the passed fds (the listening socket first,
  /// then the stored fds in the order stored) and $WATCHDOG_USEC, and waits for READY=1.
  /// @throws std::runtime_error with the tail of the daemon's log when it exits first or is
  /// not ready within 10 s; std::logic_error when it runs already.
  void start();
  /// @brief Sends @p signal and reaps the daemon (SIGKILL after 20 s); every message it sent
  /// before it died has been handled on return, as systemd does. The store keeps its fds.
  /// @return the wait status.
  /// @throws std::logic_error when no daemon runs.
  int kill(int signal);
  /// @brief kill(@p signal) when the daemon runs, then start().
  void restart(int signal = SIGKILL);
  /// @brief Arguments of the next start() (the options' args until then).
  void set_args(std::vector<std::string> args);

  const std::string& socket_path() const { return socket_path_; }
  std::string socket_env() const { return "GPUMEM_SOCKET=" + socket_path_; }
  pid_t pid() const;
  bool running() const;

  std::vector<std::string> stored_names() const;  // one entry per stored fd, in the order stored
  /// @brief The first stored fd named @p name, still the store's; -1 when none. For tests that
  /// damage what a daemon stored.
  int stored_descriptor(const std::string& name) const;
  /// @brief Drops the stored fds named @p name, as FDSTOREREMOVE=1 does.
  void remove_stored(const std::string& name);
  /// @brief Stores @p fd under @p name, as FDSTORE=1 does. With remove_stored(), for tests that
  /// put back what the store held at another time.
  void add_stored(const std::string& name, unique_fd fd);
  std::size_t stored_count() const;
  std::string status() const;  // the last STATUS=
  /// @brief Every message of the daemon's main process, in order, over all its starts.
  std::vector<std::string> notifications() const;
  unsigned watchdog_pings() const;
  /// @brief How often the daemon was killed for missing its watchdog (options::watchdog): as
  /// systemd does when no WATCHDOG=1 came within the interval, though with SIGKILL at once
  /// (systemd sends SIGABRT first, which a stopped process does not act on). start() again
  /// plays Restart=.
  unsigned watchdog_kills() const;
  /// @brief Polls @p condition until it holds or @p within passed; whether it held.
  bool wait_for(std::function<bool()> condition, std::chrono::milliseconds within) const;
  /// @brief Open descriptors of the daemon process right now (/proc/PID/fd).
  std::size_t open_fd_count() const;
  gpumem::Client connect(const std::string& label = "test") const;
  /// @brief The end of what the daemon wrote to stdout and stderr, over all its starts.
  std::string log_tail(std::size_t bytes = 4000) const;

 private:
  struct stored_fd {
    std::string name;
    unique_fd fd;
  };

  void receive_loop();
  /// How long poll() may wait before the watchdog is due; -1 without one.
  int watchdog_wait_ms() const;
  /// Kills the daemon when its watchdog expired.
  void enforce_watchdog();
  /// One datagram of @p sender; @p fds close unless the store keeps them.
  void handle(pid_t sender, std::string_view message, std::vector<unique_fd> fds);
  void store(const std::string& name, std::vector<unique_fd> fds);
  void forget(const std::string& name);
  /// Returns once every datagram queued on the notification socket before the call is handled.
  void flush();
  /// Reaps a daemon that ended by itself (flushing its last messages); whether none runs now.
  bool collect_ended();
  void wait_until_ready();

  options options_;
  std::string folder_;
  std::string socket_path_;
  std::string notify_path_;
  unique_fd listener_;
  unique_fd notify_socket_;
  unique_fd log_;
  unique_fd wake_read_;  // written to stop the receiving thread
  unique_fd wake_write_;

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable changed_;
  pid_t pid_ = -1;  // the main process: the only one whose messages count
  bool ready_ = false;
  std::string status_;
  std::vector<std::string> notifications_;
  unsigned pings_ = 0;
  std::chrono::steady_clock::time_point last_ping_{};  // or READY=1, when none came since
  unsigned watchdog_kills_ = 0;
  std::vector<stored_fd> store_;
  unsigned flushes_sent_ = 0;
  unsigned flushes_done_ = 0;

  std::thread receiver_;
};

}  // namespace gpumem::testing
