#pragma once
// Where a benchmark's daemons and clients run. Left to the scheduler, a round trip on the 2-core
// development VM took either ~10-17 us (client and daemon loop on one core) or ~50-110 us (across
// cores, each wake-up an idle core's), and the scheduler chose anew for each daemon and each
// stretch of a run: two daemons compared in one run sat on different sides of that split, which
// read as a 12-fold cost of one of them. Pinned, every daemon compared is measured the same way.

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

class cpu_placement {
 public:
  enum class sides {
    apart,     ///< a round trip is two wake-ups of the other core, as between busy processes
    together,  ///< a round trip is both sides' work and two switches: what a request costs
  };

  /// Puts each daemon's loop thread (its main thread, whose id is its pid) on the first CPU this
  /// thread may use and this thread, and so every process it forks from now on, on the second
  /// (apart) or the same (together). The destructor gives every thread pinned the CPUs it had.
  cpu_placement(std::initializer_list<pid_t> daemons, sides where) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (::sched_getaffinity(0, sizeof mine, &mine) != 0) {
      report_ = failed("sched_getaffinity");
      return;
    }
    std::vector<int> cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu) {
      if (CPU_ISSET(cpu, &mine)) cpus.push_back(cpu);
    }
    if (cpus.empty() || (where == sides::apart && cpus.size() < 2)) {
      report_ = "not pinned: one CPU only";
      return;
    }
    const int client_cpu = where == sides::apart ? cpus[1] : cpus[0];
    for (const pid_t daemon : daemons) {
      if (!pin(daemon, cpus[0])) {
        report_ = failed("sched_setaffinity");
        return;  // the destructor puts back what was pinned
      }
    }
    if (!pin(0, client_cpu)) {
      report_ = failed("sched_setaffinity");
      return;
    }
    const std::string loops = daemons.size() > 1 ? "each gpumemd's loop" : "gpumemd's loop";
    report_ = where == sides::apart ? loops + " on CPU " + std::to_string(cpus[0]) +
                                          ", the clients on CPU " + std::to_string(client_cpu)
                                    : loops + " and the clients on CPU " + std::to_string(cpus[0]);
  }
  ~cpu_placement() {
    for (const auto& [thread, had] : pinned_) ::sched_setaffinity(thread, sizeof had, &had);
  }
  cpu_placement(const cpu_placement&) = delete;
  cpu_placement& operator=(const cpu_placement&) = delete;

  /// What was done, for the benchmark's report.
  const std::string& report() const noexcept { return report_; }

 private:
  bool pin(pid_t thread, int cpu) {
    cpu_set_t had;
    CPU_ZERO(&had);
    if (::sched_getaffinity(thread, sizeof had, &had) != 0) return false;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (::sched_setaffinity(thread, sizeof one, &one) != 0) return false;
    pinned_.emplace_back(thread, had);
    return true;
  }
  static std::string failed(const char* call) {
    return std::string("not pinned: ") + call + ": " + std::strerror(errno);
  }

  std::vector<std::pair<pid_t, cpu_set_t>> pinned_;
  std::string report_;
};
