#pragma once
// A child process started with fork+exec, its stdout on a pipe, for multi-process tests.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::testing {

/// A user and group for a child to run as: tests run as root drop a child to another uid.
struct run_as {
  uid_t uid;
  gid_t gid;
};

/// How a child starts besides its argv and environment.
struct child_setup {
  bool stderr_to_stdout = false;  ///< read_line() reads its stderr too, in the order written
  std::optional<run_as> user;     ///< nullopt: the parent's; else set before exec (needs root)
};

class child_process {
 public:
  /// @brief Starts argv[0] (a path) with the parent's environment plus @p extra_env.
  explicit child_process(const std::vector<std::string>& argv,
                         const std::vector<std::string>& extra_env = {},
                         const child_setup& setup = {});
  child_process(child_process&&) noexcept;
  child_process& operator=(child_process&&) = delete;
  ~child_process();  // SIGKILLs and reaps a child still running

  pid_t pid() const noexcept { return pid_; }

  /// @brief Next line of the child's stdout, without the newline; nullopt on EOF or timeout.
  std::optional<std::string> read_line(
      std::chrono::milliseconds timeout = std::chrono::seconds(10));

  void signal(int number) const;
  /// @brief Waits for the child to end; its wait status, or nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  pid_t pid_ = -1;
  unique_fd stdout_;
  std::string pending_;
};

/// @brief Exit code of a wait status, or 128+signal when it was killed.
int exit_code(int status);

/// @brief Open descriptors of process @p pid right now (/proc/PID/fd).
std::size_t open_fd_count(pid_t pid);

}  // namespace gpumem::testing
