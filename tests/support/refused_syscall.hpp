#pragma once
/// @file
/// @brief Running test code where one system call fails, as a container's seccomp filter or an
/// older kernel makes it fail: for the fallbacks of code that uses newer calls.

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "support/eventually.hpp"

namespace gpumem::testing {

/// What became of run_where_syscall_fails's child.
struct refused_syscall_run {
  /// False where this process may not install a seccomp filter (in some containers): the test
  /// cannot run here and skips.
  bool filter_installed = true;
  std::string failure;  ///< empty when the body returned true in time
};

/// @brief Forks a child in which system call @p number fails with @p error (a seccomp filter),
/// and runs @p body there. A child still running after @p within is killed.
template <typename Body>
refused_syscall_run run_where_syscall_fails(long number, int error, const Body& body,
                                            std::chrono::milliseconds within) {
  constexpr int kPassed = 0;
  constexpr int kFailed = 1;
  constexpr int kNoFilter = 2;
  constexpr int kThrew = 3;
  const pid_t child = ::fork();
  if (child < 0) return {.failure = "fork failed"};
  if (child == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(number), 0, 1),
        BPF_STMT(BPF_RET | BPF_K,
                 SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(error) & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
      ::_exit(kNoFilter);
    }
    // Nothing may leave the child but its status: an exception would run the rest of the test
    // program a second time, in the child.
    try {
      ::_exit(body() ? kPassed : kFailed);
    } catch (...) {
      ::_exit(kThrew);
    }
  }
  int status = 0;
  const bool ended = eventually([&] { return ::waitpid(child, &status, WNOHANG) == child; }, within,
                                std::chrono::milliseconds(5));
  if (!ended) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    return {.failure =
                "the child was still running after " + std::to_string(within.count()) + " ms"};
  }
  if (!WIFEXITED(status)) {
    return {.failure = "the child ended with signal " + std::to_string(WTERMSIG(status))};
  }
  switch (WEXITSTATUS(status)) {
    case kPassed:
      return {};
    case kNoFilter:
      return {.filter_installed = false, .failure = ""};
    case kThrew:
      return {.failure = "the test's body threw in the child"};
    default:
      return {.failure = "the test's body failed in the child"};
  }
}

}  // namespace gpumem::testing
