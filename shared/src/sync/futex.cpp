#include "gpumem/shared/sync/futex.hpp"

#include <linux/futex.h>
#include <linux/time_types.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
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

futex_sleep futex_wait_any(std::span<const futex_expectation> words,
                           std::optional<std::chrono::steady_clock::time_point> deadline) noexcept {
  // The kernel and the process's seccomp filter do not change their answer: ask once.
  static std::atomic<bool> refused{false};
  std::array<futex_waitv, 8> waiters{};
  if (refused.load(std::memory_order_relaxed) || words.size() > waiters.size()) {
    return futex_sleep::unavailable;
  }
  for (std::size_t i = 0; i < words.size(); ++i) {
    waiters[i].val = words[i].expected;
    waiters[i].uaddr = reinterpret_cast<std::uintptr_t>(words[i].word);
    // Not FUTEX_PRIVATE_FLAG: the words are in memory other processes map.
    waiters[i].flags = FUTEX_32;
  }
  // An absolute time on CLOCK_MONOTONIC, which is steady_clock's.
  __kernel_timespec until{};
  if (deadline) {
    const auto ns = std::max<std::int64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline->time_since_epoch()).count(),
        0);
    until.tv_sec = ns / 1'000'000'000;
    until.tv_nsec = ns % 1'000'000'000;
  }
  if (::syscall(SYS_futex_waitv, waiters.data(), static_cast<unsigned>(words.size()), 0u,
                deadline ? &until : nullptr, CLOCK_MONOTONIC) >= 0) {
    return futex_sleep::ended;
  }
  switch (errno) {
    case EAGAIN:
    case ETIMEDOUT:
      return futex_sleep::ended;
    case EINTR:
      return futex_sleep::signal;
    default:
      // ENOSYS from an older kernel, EPERM or ENOSYS from a seccomp filter (a container's).
      refused.store(true, std::memory_order_relaxed);
      return futex_sleep::unavailable;
  }
}

}  // namespace gpumem::sync
