#pragma once
// The soak driver: a real gpumemd, worker processes that it SIGKILLs and restarts at random,
// and the checks at the end (nothing leaked, nothing hung, the daemon alive and back to its size).

#include <chrono>
#include <cstdint>
#include <string>

namespace gpumem::soak {

struct soak_options {
  std::chrono::seconds duration{60};
  unsigned clients = 8;
  std::chrono::milliseconds kill_interval{500};
  std::uint64_t seed = 1;
  /// A worker silent (no progress line) this long is hung.
  std::chrono::seconds hang_after{10};
  /// How much the daemon's resident memory may grow from the end of warm-up to the end.
  std::uint64_t rss_tolerance_kib = 4096;
  /// How many more descriptors the daemon may hold at the end than after warm-up.
  std::size_t fd_tolerance = 0;
  std::string worker_binary;  ///< this program, run with `worker`
};

/// @return the exit status: 0 when every check passed.
int run_soak(const soak_options& options);

}  // namespace gpumem::soak
