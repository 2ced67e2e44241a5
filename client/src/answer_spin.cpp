#include "answer_spin.hpp"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "env_number.hpp"

namespace gpumem::detail {

namespace {

/// The cgroup (v2) that @p membership names, e.g. "/system.slice/worker.service"; empty when
/// unknown.
std::string own_cgroup(const std::filesystem::path& membership) {
  std::ifstream lines(membership);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("0::")) return line.substr(3);
  }
  return {};
}

/// The CPUs that @p group's `cpu.max` allows ("max 100000": no limit; "150000 100000": 1.5).
double cgroup_quota(const std::filesystem::path& cgroups, const std::string& group) {
  std::ifstream file(cgroups.string() + group + "/cpu.max");
  std::string quota;
  double period = 0;
  if (!(file >> quota >> period) || quota == "max" || period <= 0) return 1e9;
  try {
    return std::stod(quota) / period;
  } catch (const std::exception&) {
    return 1e9;
  }
}

}  // namespace

double usable_cpus(const std::filesystem::path& cgroups, const std::filesystem::path& membership) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  double usable = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  // A group's limit holds for every group below it.
  std::string group = own_cgroup(membership);
  while (!group.empty()) {
    usable = std::min(usable, cgroup_quota(cgroups, group == "/" ? "" : group));
    if (group == "/") break;
    const auto parent = group.find_last_of('/');
    group = parent == 0 ? "/" : group.substr(0, parent);
  }
  return usable;
}

std::chrono::microseconds longest_answer_spin() {
  if (const auto set = number_from_env("GPUMEM_ANSWER_SPIN_US", 0, kLongestAnswerSpin.count(),
                                       "a number of microseconds from 0 (never spin) to 1000")) {
    return std::chrono::microseconds(*set);
  }
  return usable_cpus() >= kCpusToSpin ? kAnswerSpin : std::chrono::microseconds(0);
}

}  // namespace gpumem::detail
