#pragma once
// One soak client process: random allocations, opens, releases, locks, barriers, channels and
// listings against the daemon, each with a bound on how long it may take, until SIGTERM.

#include <cstdint>
#include <string>

namespace gpumem::soak {

/// What a worker reports on stdout, one line every kReportInterval and one when it ends:
/// "progress OPS UNEXPECTED SLOW" (counts since it started), then "done OPS UNEXPECTED SLOW".
struct worker_report {
  std::uint64_t ops = 0;
  std::uint64_t unexpected = 0;  ///< errors no operation of the soak should meet
  std::uint64_t slow = 0;        ///< operations that took well past their own time bound
};

struct worker_options {
  std::string socket_path;
  std::uint64_t seed = 1;
};

/// @return the process's exit status: 0 after a clean stop, 1 when something unexpected
/// happened (the report says how much).
int run_worker(const worker_options& options);

}  // namespace gpumem::soak
