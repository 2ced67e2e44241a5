#pragma once
// How many descriptors this process has open, for tests that a path leaks none.

#include <cstddef>
#include <filesystem>

namespace gpumem::testing {

inline std::size_t open_fds_of_this_process() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

}  // namespace gpumem::testing
