#pragma once
/// @file
/// @brief A file with given text under the tests' temporary folder, removed with the object, also
/// when a failed assertion ends the test early: a configuration a daemon is started with, say.

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <string_view>

namespace gpumem::testing {

class temporary_file {
 public:
  /// @param stem the start of the file's name; the process id and a count make it unique.
  temporary_file(std::string_view stem, std::string_view text) {
    static int made = 0;
    path_ = ::testing::TempDir() + std::string(stem) + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(++made);
    std::ofstream(path_) << text;
  }
  ~temporary_file() { ::unlink(path_.c_str()); }
  temporary_file(const temporary_file&) = delete;
  temporary_file& operator=(const temporary_file&) = delete;

  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

}  // namespace gpumem::testing
