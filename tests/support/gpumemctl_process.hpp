#pragma once
// gpumemctl run against a test daemon, for black-box tests of what operators see.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "child_process.hpp"
#include "daemon_process.hpp"

namespace gpumem::testing {

/// @brief Everything gpumemctl prints for @p args, its errors included, and its exit code (-1:
/// it did not end). It runs as @p user where one is given.
std::pair<std::string, int> run_gpumemctl(const daemon_process& daemon,
                                          const std::vector<std::string>& args,
                                          std::optional<run_as> user = std::nullopt);

/// @brief As above with @p args as they are: no socket option put before them.
std::pair<std::string, int> run_gpumemctl(const std::vector<std::string>& args,
                                          std::optional<run_as> user = std::nullopt);

/// @brief gpumemctl started with @p args after the daemon's socket, its stderr with its
/// stdout, for tests that read a live view as it goes.
child_process start_gpumemctl(const daemon_process& daemon, const std::vector<std::string>& args);

}  // namespace gpumem::testing
