#pragma once
/// @file
/// @brief `--watch` and `top`: a command's output printed again and again, as a live view.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>

namespace gpumemctl {

struct watch_plan {
  std::chrono::duration<double> interval;
  std::uint64_t iterations = 0;  ///< how many frames to print; 0: until interrupted
};

/// @brief Prints a frame, the output of @p print_frame, every interval. On a terminal each
/// frame replaces the last (the screen is cleared); elsewhere the frames follow one another,
/// each under a heading line "Every 2s: @p title  <local time>" and apart by a blank line;
/// with @p as_json each frame's JSON document is one line (JSON lines), without headings.
/// An error of a frame ends the watch by its exception.
void watch(const watch_plan& plan, std::string_view title, bool as_json,
           const std::function<void()>& print_frame);

}  // namespace gpumemctl
