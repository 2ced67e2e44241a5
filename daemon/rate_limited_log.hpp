#pragma once
/// @file
/// @brief A warning that can fire once per event of a flood (a connect storm, the fd limit)
/// writes at most one line per interval, saying how many it held back; rate_limited_logs keeps
/// one such limit per kind of line.

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace gpumem::daemon {

class rate_limited_log {
 public:
  using clock = std::chrono::steady_clock;

  explicit rate_limited_log(clock::duration interval) : interval_(interval) {}

  /// @brief Logs at @p level unless a line went out less than the interval ago; the next line
  /// that goes out counts those held back.
  template <class... Args>
  void log(spdlog::level::level_enum level, fmt::format_string<Args...> format, Args&&... args) {
    if (!spdlog::should_log(level)) return;
    const auto now = clock::now();
    if (now < next_) {
      ++held_back_;
      return;
    }
    next_ = now + interval_;
    std::string line = fmt::format(format, std::forward<Args>(args)...);
    if (held_back_ > 0) {
      line += fmt::format(" ({} more like it held back)", std::exchange(held_back_, 0));
    }
    spdlog::log(level, line);
  }

  template <class... Args>
  void warn(fmt::format_string<Args...> format, Args&&... args) {
    log(spdlog::level::warn, format, std::forward<Args>(args)...);
  }

 private:
  clock::duration interval_;
  clock::time_point next_{};
  std::uint64_t held_back_ = 0;
};

/// @brief A rate_limited_log per kind of line, so that a flood of one kind (a client hammering
/// at one refusal) holds back no line of another, and "N more like it" counts only its own
/// kind. @p Key comes from a small fixed set (a message type and error code, a problem's text
/// in the code), which bounds the map.
template <class Key>
class rate_limited_logs {
 public:
  explicit rate_limited_logs(rate_limited_log::clock::duration interval) : interval_(interval) {}

  rate_limited_log& of(const Key& kind) { return logs_.try_emplace(kind, interval_).first->second; }

 private:
  rate_limited_log::clock::duration interval_;
  std::map<Key, rate_limited_log> logs_;
};

}  // namespace gpumem::daemon
