#pragma once
/// @file
/// @brief A new, empty folder of the test's own under the system's temporary folder: for a
/// daemon's socket, state and log. The caller removes it.

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace gpumem::testing {

/// Makes "<temporary folder>/gpumemd-<purpose>-XXXXXX" (mkdtemp) and returns its path; the
/// purpose names the test in a listing of leftovers.
inline std::string make_temporary_folder(std::string_view purpose) {
  std::string pattern =
      (std::filesystem::temp_directory_path() / ("gpumemd-" + std::string(purpose) + "-XXXXXX"))
          .string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
  }
  return pattern;
}

}  // namespace gpumem::testing
