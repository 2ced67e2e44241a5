#pragma once
// What the scheduler says a thread or a process is doing, for tests that must know another is
// asleep, or stopped, before they go on.

#include <sys/types.h>

#include <fstream>
#include <iterator>
#include <string>

namespace gpumem::testing {

/// The state letter in the `stat` file at @p path: 'R' running, 'S' asleep, 'T' stopped, and so
/// on; '?' when it cannot be read.
inline char scheduler_state(const std::string& path) {
  std::ifstream stat(path);
  const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto name_end = text.rfind(')');  // the thread's name may hold spaces and parentheses
  return name_end == std::string::npos || name_end + 2 >= text.size() ? '?' : text[name_end + 2];
}

/// The state letter of this process's thread @p tid.
inline char thread_state(pid_t tid) {
  return scheduler_state("/proc/self/task/" + std::to_string(tid) + "/stat");
}

/// The state letter of process @p pid (its main thread).
inline char process_state(pid_t pid) {
  return scheduler_state("/proc/" + std::to_string(pid) + "/stat");
}

}  // namespace gpumem::testing
