#include "systemd/watchdog.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace gpumem::daemon::systemd {

namespace {
std::optional<unsigned long long> positive_number(const char* text) {
  if (text == nullptr) return std::nullopt;
  unsigned long long value = 0;
  const char* end = text + std::strlen(text);
  const auto [stop, error] = std::from_chars(text, end, value);
  if (error != std::errc{} || stop != end || value == 0) return std::nullopt;
  return value;
}
}  // namespace

std::optional<std::chrono::microseconds> watchdog_interval() noexcept {
  if (const char* pid_text = std::getenv("WATCHDOG_PID")) {
    const auto pid = positive_number(pid_text);
    if (!pid || *pid != static_cast<unsigned long long>(::getpid())) return std::nullopt;
  }
  const auto usec = positive_number(std::getenv("WATCHDOG_USEC"));
  if (!usec || *usec > static_cast<unsigned long long>(std::chrono::microseconds::max().count())) {
    return std::nullopt;
  }
  return std::chrono::microseconds(static_cast<std::chrono::microseconds::rep>(*usec));
}

}  // namespace gpumem::daemon::systemd
