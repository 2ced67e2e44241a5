#pragma once
// gpumemctl run against a test daemon, for black-box tests of what operators see.

#include <string>
#include <utility>
#include <vector>

#include "daemon_process.hpp"

namespace gpumem::testing {

/// @brief Everything gpumemctl prints for @p args, and its exit code (-1: it did not end).
std::pair<std::string, int> run_gpumemctl(const daemon_process& daemon,
                                          const std::vector<std::string>& args);

}  // namespace gpumem::testing
