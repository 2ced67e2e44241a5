#include "gpumem/shared/sync/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>

namespace gpumem::sync {

namespace {

// futex_waitv's arguments as the kernel lays them out (Linux 5.16), spelled here so that the
// library also builds against older kernel headers; such kernels answer ENOSYS.
#ifdef SYS_futex_waitv
constexpr long kFutexWaitv = SYS_futex_waitv;
#else
constexpr long kFutexWaitv = 449;  // one number on every architecture
#endif
struct waitv_entry {
  std::uint64_t expected;
  std::uint64_t address;
  std::uint32_t flags;
  std::uint32_t reserved;
};
static_assert(sizeof(waitv_entry) == 24);
constexpr std::uint32_t kFutexSize32 = 2;  // FUTEX2_SIZE_U32: a 32-bit word
struct kernel_timespec {
  std::int64_t seconds;
  std::int64_t nanoseconds;
};

}  // namespace

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
  std::array<waitv_entry, 8> waiters{};
  if (refused.load(std::memory_order_relaxed) || words.size() > waiters.size()) {
    return futex_sleep::unavailable;
  }
  for (std::size_t i = 0; i < words.size(); ++i) {
    waiters[i].expected = words[i].expected;
    waiters[i].address = reinterpret_cast<std::uintptr_t>(words[i].word);
    // Not FUTEX_PRIVATE_FLAG: the words are in memory other processes map.
    waiters[i].flags = kFutexSize32;
  }
  // An absolute time on CLOCK_MONOTONIC, which is steady_clock's.
  kernel_timespec until{};
  if (deadline) {
    const auto ns = std::max<std::int64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline->time_since_epoch()).count(),
        0);
    until.seconds = ns / 1'000'000'000;
    until.nanoseconds = ns % 1'000'000'000;
  }
  if (::syscall(kFutexWaitv, waiters.data(), static_cast<unsigned>(words.size()), 0u,
                deadline ? &until : nullptr, CLOCK_MONOTONIC) >= 0) {
    return futex_sleep::ended;
  }
  switch (errno) {
    case EAGAIN:
    case ETIMEDOUT:
      return futex_sleep::ended;
    case EINTR:
      return futex_sleep::signal;
    case ENOSYS:  // an older kernel, or a seccomp filter (a container's)
    case EPERM:   // a seccomp filter
      refused.store(true, std::memory_order_relaxed);
      return futex_sleep::unavailable;
    default:  // a fault or a refused argument: this call only
      return futex_sleep::unavailable;
  }
}

}  // namespace gpumem::sync
