#include "gpumem/shared/sync/nap.hpp"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace gpumem::sync {

bool nap(std::chrono::nanoseconds duration) noexcept {
  const auto ns = std::max<std::int64_t>(duration.count(), 0);
  const timespec relative{static_cast<time_t>(ns / 1'000'000'000),
                          static_cast<long>(ns % 1'000'000'000)};
  // clock_nanosleep is never restarted after a handler (signal(7)), and it returns the error
  // number rather than setting errno.
  return ::clock_nanosleep(CLOCK_MONOTONIC, 0, &relative, nullptr) == EINTR;
}

}  // namespace gpumem::sync
