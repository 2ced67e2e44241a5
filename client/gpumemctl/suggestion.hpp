#pragma once
/// @file
/// @brief "did you mean": the known name nearest to a mistyped one.

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace gpumemctl {

/// @brief Insertions, deletions and substitutions that turn @p from into @p to (Levenshtein).
std::size_t edit_distance(std::string_view from, std::string_view to);

/// @brief The name of @p known nearest to @p typed, when it is near enough to be what was
/// meant (at most two edits, and fewer than half of the typed word); the first of equals.
std::optional<std::string> nearest_name(std::string_view typed, std::span<const std::string> known);

}  // namespace gpumemctl
