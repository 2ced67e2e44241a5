#pragma once
/// @file
/// @brief Plain-text tables and human units for gpumemctl.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace gpumemctl {

class table {
 public:
  explicit table(std::vector<std::string> headings) : headings_(std::move(headings)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out, bool with_headings = true) const;

 private:
  std::vector<std::string> headings_;
  std::vector<std::vector<std::string>> rows_;
};

/// @brief 1536 -> "1.5 KiB"; exact bytes below 1 KiB.
std::string bytes_text(std::uint64_t bytes);
/// @brief 93000 -> "1m33s".
std::string duration_text(std::uint64_t milliseconds);

}  // namespace gpumemctl
