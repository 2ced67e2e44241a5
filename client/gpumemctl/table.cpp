#include "table.hpp"

#include <algorithm>
#include <cstdio>

namespace gpumemctl {

void table::print(std::ostream& out, bool with_headings) const {
  std::vector<std::size_t> widths(headings_.size());
  const auto widen = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  };
  if (with_headings) widen(headings_);
  for (const auto& row : rows_) widen(row);
  const auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    out << line << '\n';
  };
  if (with_headings) emit(headings_);
  for (const auto& row : rows_) emit(row);
}

std::string bytes_text(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, kUnits[unit]);
  return text;
}

std::string duration_text(std::uint64_t milliseconds) {
  const std::uint64_t seconds = milliseconds / 1000;
  if (seconds < 60) return std::to_string(seconds) + "s";
  if (seconds < 3600)
    return std::to_string(seconds / 60) + "m" + std::to_string(seconds % 60) + "s";
  if (seconds < 86400) {
    return std::to_string(seconds / 3600) + "h" + std::to_string(seconds / 60 % 60) + "m";
  }
  return std::to_string(seconds / 86400) + "d" + std::to_string(seconds / 3600 % 24) + "h";
}

}  // namespace gpumemctl
