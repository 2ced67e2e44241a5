#pragma once
// Benchmarks run every CUDA user in a forked child (the parent never initialises CUDA, so it
// can fork again); a child sends its figures back through a pipe as doubles. Also waiting for
// a group of children that send nothing back.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <stdexcept>
#include <vector>

namespace gpumem::bench {

/// Whether a wait status says the child exited with status 0.
inline bool exited_cleanly(int status) {
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/// Waits for every one of @p children (none is left a zombie when one failed); whether each
/// ended as @p as_expected says of its wait status.
template <typename Predicate>
bool wait_for_all(const std::vector<pid_t>& children, Predicate as_expected) {
  bool all = true;
  for (const pid_t child : children) {
    int status = 0;
    ::waitpid(child, &status, 0);
    all &= as_expected(status);
  }
  return all;
}

/// A forked child that sends its figures back when its work is done.
struct running_child {
  pid_t pid;
  int results;  ///< read end of its pipe
};

/// Forks a child that runs @p work and writes what it returns to a pipe.
inline running_child start_child(const std::function<std::vector<double>()>& work) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    int status = 0;
    try {
      const auto values = work();
      const std::size_t count = values.size();
      (void)!::write(fds[1], &count, sizeof count);
      (void)!::write(fds[1], values.data(), count * sizeof(double));
    } catch (const std::exception& error) {
      std::fprintf(stderr, "benchmark child: %s\n", error.what());
      status = 1;
    }
    ::_exit(status);
  }
  ::close(fds[1]);
  return {child, fds[0]};
}

/// Waits for @p child and returns its figures; throws when it failed.
inline std::vector<double> collect(const running_child& child) {
  std::size_t count = 0;
  std::vector<double> values;
  if (::read(child.results, &count, sizeof count) == sizeof count) {
    values.resize(count);
    std::size_t got = 0;
    while (got < count * sizeof(double)) {
      const ssize_t n = ::read(child.results, reinterpret_cast<char*>(values.data()) + got,
                               count * sizeof(double) - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
  }
  ::close(child.results);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  if (!exited_cleanly(status)) throw std::runtime_error("a child failed");
  return values;
}

/// Runs @p work in a forked child and returns what it returned; throws when it fails.
inline std::vector<double> in_child(const std::function<std::vector<double>()>& work) {
  return collect(start_child(work));
}

}  // namespace gpumem::bench
