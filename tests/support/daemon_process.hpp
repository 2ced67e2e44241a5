#pragma once
// A real gpumemd on a socket in a fresh temporary folder, for black-box tests.

#include <signal.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "child_process.hpp"
#include "gpumem/gpumem.hpp"

namespace gpumem::testing {

class daemon_process {
 public:
  /// @brief Starts gpumemd with @p extra_args and waits until it answers.
  /// @param readable_log its log, at info, goes to read_log_line() instead of the test's stderr
  /// (read it: a full pipe would stop the daemon).
  explicit daemon_process(const std::vector<std::string>& extra_args = {},
                          bool readable_log = false);
  ~daemon_process();

  const std::string& socket_path() const noexcept { return socket_path_; }
  const std::string& folder() const noexcept { return folder_; }
  pid_t pid() const noexcept { return process_.pid(); }
  gpumem::Client connect(const std::string& label = "test") const;
  /// @brief The environment entry that points a child at this daemon.
  std::string socket_env() const { return "GPUMEM_SOCKET=" + socket_path_; }

  /// @brief The next line of its log (readable_log), nullopt when none came within @p timeout.
  std::optional<std::string> read_log_line(std::chrono::milliseconds timeout) {
    return process_.read_line(timeout);
  }
  /// @brief Reads its log (readable_log) until a line holds @p text, or none comes within
  /// @p quiet. @p seen gets every line read, for the test's messages.
  /// @return whether a line held @p text.
  bool read_log_until(std::string_view text, std::chrono::milliseconds quiet, std::string& seen) {
    while (const auto line = read_log_line(quiet)) {
      seen += *line + "\n";
      if (line->find(text) != std::string::npos) return true;
    }
    return false;
  }
  /// @brief Sends @p signal and waits; the exit status.
  int stop(int signal = SIGTERM);
  /// @brief Open descriptors of the daemon process right now.
  std::size_t open_fd_count() const;
  /// @brief Polls the daemon until bytes_in_use of pool 0 equals @p expected or time is up.
  bool wait_for_bytes_in_use(std::uint64_t expected, std::chrono::milliseconds within) const;

 private:
  std::string folder_;
  std::string socket_path_;
  child_process process_;
};

/// Paths of the binaries under test, set by CMake.
std::string daemon_binary();
/// @brief How tests start gpumemd: daemon_binary(), after the words of
/// $GPUMEM_TEST_DAEMON_WRAPPER when set (e.g. tests/sandbox/unit_sandbox and its options, to run
/// every daemon of a test under the service unit's sandbox). The wrapper must exec gpumemd in
/// its own process, so that signals and LISTEN_PID reach the daemon.
std::vector<std::string> daemon_command();
std::string peer_binary();

}  // namespace gpumem::testing
