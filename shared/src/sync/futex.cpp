#include "gpumem/shared/sync/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace gpumem::sync {

bool futex_wait(const std::uint32_t* word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout) noexcept {
  timespec relative{};
  if (timeout) {
    const auto ns = std::max<std::int64_t>(timeout->count(), 0);
    relative.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    relative.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  }
  // Not FUTEX_PRIVATE_FLAG: the word is in memory other processes map.
  return ::syscall(SYS_futex, word, FUTEX_WAIT, expected, timeout ? &relative : nullptr, nullptr,
                   0) != 0 &&
         errno == EINTR;
}

void futex_wake(const std::uint32_t* word, int count) noexcept {
  ::syscall(SYS_futex, word, FUTEX_WAKE, count < 0 ? INT32_MAX : count, nullptr, nullptr, 0);
}

}  // namespace gpumem::sync
