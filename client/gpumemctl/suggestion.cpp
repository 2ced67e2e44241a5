#include "suggestion.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

namespace gpumemctl {

std::size_t edit_distance(std::string_view from, std::string_view to) {
  // One row of the classic table at a time: row[j] is the distance from the prefix of `from`
  // read so far to to[0, j).
  std::vector<std::size_t> row(to.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= from.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= to.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + (from[i - 1] == to[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[to.size()];
}

std::optional<std::string> nearest_name(std::string_view typed,
                                        std::span<const std::string> known) {
  constexpr std::size_t kMostEdits = 2;
  std::optional<std::string> nearest;
  std::size_t nearest_distance = kMostEdits + 1;
  for (const auto& name : known) {
    const std::size_t distance = edit_distance(typed, name);
    if (distance < nearest_distance && 2 * distance < typed.size()) {
      nearest = name;
      nearest_distance = distance;
    }
  }
  return nearest;
}

}  // namespace gpumemctl
