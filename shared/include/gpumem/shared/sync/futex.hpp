#pragma once
/// @file
/// @brief Waiting for another process to change a 32-bit word of shared memory: sleeping on it
/// (futex), and the turns of a spin before that.

#include <sched.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>

namespace gpumem::sync {

/// @brief Sleeps while *word == expected, at most @p timeout (none: until woken). Returns early
/// on a wake-up, a signal or a changed value; callers re-check what they wait for.
/// @return true when a signal handler ended the sleep (signals_end_waits uses it).
bool futex_wait(const std::uint32_t* word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout = std::nullopt) noexcept;

/// @brief Wakes up to @p count sleepers on @p word (all when count is negative).
void futex_wake(const std::uint32_t* word, int count = -1) noexcept;

/// A word futex_wait_any sleeps on, while it holds @p expected.
struct futex_expectation {
  const std::uint32_t* word;
  std::uint32_t expected;
};

/// How futex_wait_any's sleep ended.
enum class futex_sleep {
  ended,       ///< woken, a word had changed, or the deadline passed: callers re-check
  signal,      ///< a signal handler ended it (signals_end_waits uses it)
  unavailable  ///< the kernel (before Linux 5.16) or a seccomp filter refuses futex_waitv
};

/// @brief Sleeps while every word holds its expected value, until @p deadline (none: until
/// woken); a wake-up on any of the words (futex_wake) ends it. For a wait that any of several
/// words can end: sleeping on one of them after reading the others would miss a change to
/// those made in between, and the kernel compares them all as the sleep begins (futex_waitv).
/// At most 8 words. Once futex_waitv was refused, every call returns unavailable at once; the
/// caller then sleeps on one word, briefly, and re-checks the others.
futex_sleep futex_wait_any(std::span<const futex_expectation> words,
                           std::optional<std::chrono::steady_clock::time_point> deadline) noexcept;

/// @brief A short pause for spin loops that keeps a sibling hyper-thread running.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// One turn of a spin on another process's progress: pause at first; then yield, so that on a
/// busy machine the process awaited gets to run.
inline void spin_turn(unsigned turns_so_far) noexcept {
  if (turns_so_far < 64) {
    cpu_relax();
  } else {
    ::sched_yield();
  }
}

}  // namespace gpumem::sync
