#include "watch.hpp"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

namespace gpumemctl {

namespace {

/// Sends std::cout into a string while it lives: a frame is printed in one write, so a
/// terminal never shows half of one.
class captured_output {
 public:
  captured_output() : previous_(std::cout.rdbuf(text_.rdbuf())) {}
  ~captured_output() { std::cout.rdbuf(previous_); }
  captured_output(const captured_output&) = delete;
  captured_output& operator=(const captured_output&) = delete;
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::streambuf* previous_;
};

std::string frame_of(const std::function<void()>& print_frame) {
  const captured_output output;
  print_frame();
  return output.text();
}

std::string heading(const watch_plan& plan, std::string_view title) {
  char interval[32];
  std::snprintf(interval, sizeof interval, "%gs", plan.interval.count());
  char now[32];
  const std::time_t seconds = std::time(nullptr);
  std::tm local{};
  std::strftime(now, sizeof now, "%Y-%m-%d %H:%M:%S", ::localtime_r(&seconds, &local));
  return std::string("Every ") + interval + ": " + std::string(title) + "  " + now + "\n";
}

}  // namespace

void watch(const watch_plan& plan, std::string_view title, bool as_json,
           const std::function<void()>& print_frame) {
  static constexpr const char* kClearScreen = "\x1b[H\x1b[2J";
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  const auto interval =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(plan.interval);
  auto next = std::chrono::steady_clock::now();
  for (std::uint64_t frame = 0; plan.iterations == 0 || frame < plan.iterations; ++frame) {
    if (frame > 0) {
      // Frames keep to the interval from the first: a slow one is not added to the next wait.
      next += interval;
      const auto now = std::chrono::steady_clock::now();
      while (next < now) next += interval;
      std::this_thread::sleep_until(next);
    }
    const std::string text = frame_of(print_frame);
    if (as_json) {
      std::cout << nlohmann::json::parse(text).dump() << '\n';
    } else if (terminal) {
      std::cout << kClearScreen << heading(plan, title) << '\n' << text;
    } else {
      std::cout << (frame > 0 ? "\n" : "") << heading(plan, title) << text;
    }
    std::cout.flush();
  }
}

}  // namespace gpumemctl
