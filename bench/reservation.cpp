// Reservation benchmark: what sleep, wake and versions cost through gpumemd, against the raw
// mechanisms measured in the same run.
//   1. sleep and wake of 1, 8 and 32 GiB, twice each (the second sleep reuses the host pages the
//      wake kept), against raw cudaMemcpy device-to-host and host-to-device with pinned memory
//      (cudaMallocHost, allocated before the clock starts);
//   2. version commit latency as seen by N readers: from the writer's commit() to the moment each
//      reader's wait_version() returns with the new version mapped (the worst reader counts),
//      for a one-chunk version and a 256 MiB one (their difference is mapping time);
//   3. bringing up the Nth reader of shared weights (connect, open, map) against loading its own
//      copy (cudaMalloc plus a pinned cudaMemcpy of the same bytes).
// Every CUDA user is a forked child: the parent never initialises CUDA.
//
//   reservation_bench [--sizes 1,8,32] [--readers 8] [--rounds 50] [--daemon PATH]
//                     [--log-level info]
#include "gpumem/reservation.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_daemon.hpp"
#include "child_results.hpp"
#include "gpumem/gpumem.hpp"
#include "kernels.hpp"
#include "percentiles.hpp"

namespace {

using namespace gpumem::testing;
using gpumem::bench::collect;
using gpumem::bench::in_child;
using gpumem::bench::running_child;
using gpumem::bench::start_child;
using gpumem::bench::summarise;
using clock_type = std::chrono::steady_clock;
constexpr std::size_t kGiB = std::size_t{1} << 30;
constexpr std::size_t kMiB = std::size_t{1} << 20;
/// The raw copies go through a pinned buffer of at most this much, reused: pinning 32 GiB would
/// take about 15 s and change nothing in the rate.
constexpr std::size_t kLargestPinned = 8 * kGiB;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}
/// steady_clock is CLOCK_MONOTONIC: one clock for every process of the machine.
double now_us() {
  return std::chrono::duration<double, std::micro>(clock_type::now().time_since_epoch()).count();
}

void need_gpu() {
  if (const auto why = why_no_gpu(); !why.empty()) throw std::runtime_error(why);
}

/// [seconds to pin the buffer, device-to-host GB/s, host-to-device GB/s] for @p bytes.
std::vector<double> raw_copies(std::size_t bytes) {
  need_gpu();
  void* device = device_malloc(bytes);
  const std::size_t buffer = std::min(bytes, kLargestPinned);
  auto start = clock_type::now();
  void* host = pinned_malloc(buffer);
  const double pin_s = seconds_since(start);
  const auto copy = [&](bool to_host) {
    const auto began = clock_type::now();
    for (std::size_t done = 0; done < bytes; done += buffer) {
      char* at = static_cast<char*>(device) + done;
      const std::size_t part = std::min(buffer, bytes - done);
      to_host ? copy_to_host(host, at, part) : copy_to_device(at, host, part);
    }
    return static_cast<double>(bytes) / seconds_since(began) / 1e9;
  };
  copy(true);  // the first copy of a run pays for the copy engines' start
  const double down = copy(true);
  const double up = copy(false);
  pinned_free(host);
  device_free(device);
  return {pin_s, down, up};
}

/// [sleep seconds, wake seconds] of a reservation of @p bytes, twice over: the first sleep
/// makes its host pages, the second reuses those the wake kept (sleep_memory_kept). The bytes
/// are checked after each wake, and changed in between.
std::vector<double> sleep_and_wake(const gpumem::ConnectOptions& connect, std::size_t bytes) {
  need_gpu();
  auto client = gpumem::Client::connect(connect);
  stream_t stream = make_stream();
  auto weights = gpumem::Reservation::create(client, bytes, {.device = 0, .initial = bytes});
  std::vector<double> seconds;
  for (const unsigned char value : {3, 5}) {
    fill_on_device(weights.data(), bytes, value, stream);
    synchronize(stream);
    auto start = clock_type::now();
    weights.sleep();
    seconds.push_back(seconds_since(start));
    start = clock_type::now();
    weights.wake();
    seconds.push_back(seconds_since(start));
    if (mismatches_on_device(weights.data(), bytes, value, stream) != 0) {
      throw std::runtime_error("the woken bytes differ");
    }
  }
  weights.release();
  destroy_stream(stream);
  return seconds;
}

/// Waits until @p holders hold the reservation named @p name (the readers have opened it) and,
/// with @p on_current, map its current version (the readers have switched).
void wait_for_holders(gpumem::Client& client, const std::string& name, std::uint32_t holders,
                      bool on_current = false) {
  const auto give_up = clock_type::now() + std::chrono::seconds(60);
  while (clock_type::now() < give_up) {
    for (const auto& each : client.reservations()) {
      if (each.name == name && (on_current ? each.holders_current : each.holders) >= holders) {
        return;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  throw std::runtime_error("the readers of " + name + " did not come within 60 s");
}

/// Per round, the commit's start (µs on the shared clock), then the commit call's length (µs).
std::vector<double> write_versions(const gpumem::ConnectOptions& connect, const std::string& name,
                                   std::size_t bytes, int readers, int rounds) {
  need_gpu();
  auto client = gpumem::Client::connect(connect);
  stream_t stream = make_stream();
  auto weights =
      gpumem::Reservation::create(client, bytes, {.device = 0, .name = name, .initial = bytes});
  wait_for_holders(client, name, static_cast<std::uint32_t>(readers) + 1);
  std::vector<double> starts, calls;
  // Round 0 is not timed: a reader counts as a holder once the daemon answers its open, while
  // it may still be starting CUDA to map the chunks (0.9 s on an H200 host, which the first
  // commit then waited for).
  for (int round = 0; round <= rounds; ++round) {
    auto draft = weights.begin_version(bytes);
    fill_on_device(draft.data(), bytes, static_cast<std::uint32_t>(draft.version()), stream);
    synchronize(stream);
    const double began = now_us();
    draft.commit();
    if (round > 0) {
      calls.push_back(now_us() - began);
      starts.push_back(began);
    }
    // The next version must not overtake this one: every reader switches first.
    wait_for_holders(client, name, static_cast<std::uint32_t>(readers) + 1, true);
  }
  starts.insert(starts.end(), calls.begin(), calls.end());
  destroy_stream(stream);
  return starts;
}

/// Per timed version (after the first two), when wait_version() returned with it mapped (µs,
/// shared clock).
std::vector<double> read_versions(const gpumem::ConnectOptions& connect, const std::string& name,
                                  int rounds) {
  need_gpu();
  auto client = gpumem::Client::connect(connect);
  std::optional<gpumem::Reservation> weights;
  while (!weights) {
    try {
      weights.emplace(
          gpumem::Reservation::open(client, name, {.access = gpumem::Access::read_only}));
    } catch (const gpumem::Error& error) {
      if (error.status() != gpumem::errc::not_found) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  std::vector<double> seen;  // versions 2 (round 0, untimed), 3, ...
  while (seen.size() < static_cast<std::size_t>(rounds) + 1) {
    if (!weights->wait_version(weights->version() + 1, std::chrono::seconds(60))) {
      throw std::runtime_error("no new version within 60 s");
    }
    // A version this reader never mapped (the next came first) counts as seen with the next.
    const double now = now_us();
    while (seen.size() < std::min<std::size_t>(rounds + 1, weights->version() - 1)) {
      seen.push_back(now);
    }
  }
  seen.erase(seen.begin());
  return seen;
}

void commit_latency(const gpumem::ConnectOptions& connect, std::size_t bytes, int readers,
                    int rounds) {
  const std::string name = "bench-versions-" + std::to_string(bytes);
  const running_child writer =
      start_child([&] { return write_versions(connect, name, bytes, readers, rounds); });
  std::vector<running_child> watching;
  for (int index = 0; index < readers; ++index) {
    watching.push_back(start_child([&] { return read_versions(connect, name, rounds); }));
  }
  std::vector<std::vector<double>> seen;
  for (const auto& reader : watching) seen.push_back(collect(reader));
  const auto written = collect(writer);
  std::vector<double> worst, calls(written.begin() + rounds, written.end());
  for (int round = 0; round < rounds; ++round) {
    double latest = 0;
    for (const auto& one : seen) latest = std::max(latest, one.at(round) - written.at(round));
    worst.push_back(latest);
  }
  const auto latency = summarise(worst);
  const auto call = summarise(calls);
  std::printf("  %8.0f MiB  %9.3f ms  %9.3f ms  %12.3f ms\n", static_cast<double>(bytes) / kMiB,
              latency.median / 1000, latency.p99 / 1000, call.median / 1000);
}

/// [seconds for the reader to connect, open and map; seconds to load its own copy instead].
std::vector<double> bring_up_reader(const gpumem::ConnectOptions& connect, const std::string& name,
                                    std::size_t bytes) {
  need_gpu();
  stream_t stream = make_stream();  // CUDA starts before either clock: both pay it alike
  auto start = clock_type::now();
  auto client = gpumem::Client::connect(connect);
  auto weights = gpumem::Reservation::open(client, name, {.access = gpumem::Access::read_only});
  const double shared_s = seconds_since(start);
  if (mismatches_on_device(weights.data(), bytes, 4, stream) != 0) {
    throw std::runtime_error("a reader sees other bytes");
  }
  void* host = pinned_malloc(bytes);
  start = clock_type::now();
  void* own = device_malloc(bytes);
  copy_to_device(own, host, bytes);
  const double own_s = seconds_since(start);
  device_free(own);
  pinned_free(host);
  destroy_stream(stream);
  return {shared_s, own_s};
}

void reader_bring_up(const gpumem::ConnectOptions& connect, int readers) {
  constexpr std::size_t kWeights = kGiB;
  const std::string name = "bench-shared-weights";
  int release[2];
  if (::pipe(release) != 0) throw std::runtime_error("pipe");
  const running_child owner = start_child([&] {
    ::close(release[1]);
    need_gpu();
    auto client = gpumem::Client::connect(connect);
    stream_t stream = make_stream();
    auto weights = gpumem::Reservation::create(client, kWeights,
                                               {.device = 0, .name = name, .initial = kWeights});
    fill_on_device(weights.data(), kWeights, 4, stream);
    synchronize(stream);
    char ignored = 0;
    (void)!::read(release[0], &ignored, 1);  // until the parent closes its end
    return std::vector<double>{};
  });
  ::close(release[0]);
  auto client = gpumem::Client::connect(connect);  // no CUDA here: lists only
  wait_for_holders(client, name, 1);
  for (int reader = 1; reader <= readers; ++reader) {
    const auto times = in_child([&] { return bring_up_reader(connect, name, kWeights); });
    std::printf("  %6d  %12.2f ms  %14.2f ms  %7.3f\n", reader, times.at(0) * 1000,
                times.at(1) * 1000, times.at(0) / times.at(1));
  }
  ::close(release[1]);
  collect(owner);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpumemd reservation benchmark: sleep, wake and versions"};
  std::vector<std::size_t> sizes{1, 8, 32};
  int readers = 8;
  int rounds = 50;
  std::string daemon = GPUMEM_BENCH_DAEMON;
  std::string log_level = "warn";
  app.add_option("--sizes", sizes, "GiB slept and woken, one figure each")->delimiter(',');
  app.add_option("--readers", readers, "processes reading versions")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "versions committed per size")->check(CLI::PositiveNumber);
  app.add_option("--daemon", daemon, "gpumemd binary")->check(CLI::ExistingFile);
  app.add_option("--log-level", log_level, "gpumemd's log level (its log goes to stderr)");
  CLI11_PARSE(app, argc, argv);

  // Enough for the largest size: the second sleep of each reuses the pages of the first.
  const std::size_t largest = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
  const bench_daemon gpumemd(daemon, "gpumem-reservation-bench", log_level,
                             "sleep_memory_kept: " + std::to_string(largest) + "GiB\n");
  const gpumem::ConnectOptions connect{.socket_path = gpumemd.socket(), .label = "bench"};
  try {
    std::printf("sleep and wake against raw pinned cudaMemcpy (GB/s; ratio = gpumemd / raw)\n");
    std::printf("  %5s  %8s  %8s  %6s   %8s  %8s  %6s   %s\n", "GiB", "raw D2H", "sleep", "ratio",
                "raw H2D", "wake", "ratio", "cycle");
    for (const std::size_t gib : sizes) {
      const std::size_t bytes = gib * kGiB;
      const auto raw = in_child([&] { return raw_copies(bytes); });
      const auto ours = in_child([&] { return sleep_and_wake(connect, bytes); });
      for (const std::size_t cycle : {0, 1}) {
        const double sleep_rate = static_cast<double>(bytes) / ours.at(2 * cycle) / 1e9;
        const double wake_rate = static_cast<double>(bytes) / ours.at(2 * cycle + 1) / 1e9;
        std::printf("  %5zu  %8.1f  %8.1f  %6.2f   %8.1f  %8.1f  %6.2f   %s\n", gib, raw.at(1),
                    sleep_rate, sleep_rate / raw.at(1), raw.at(2), wake_rate, wake_rate / raw.at(2),
                    cycle == 0 ? "first sleep: host pages made" : "again: the kept pages");
      }
      std::printf("  raw pinning: %.2f s for %zu GiB\n", raw.at(0),
                  std::min(bytes, kLargestPinned) / kGiB);
    }
    std::printf(
        "\nversion commit seen by %d readers (commit() to the last reader's "
        "wait_version() returning mapped)\n",
        readers);
    std::printf("  %12s  %12s  %12s  %15s\n", "version", "median", "p99", "commit() call");
    commit_latency(connect, 2 * kMiB, readers, rounds);
    commit_latency(connect, 256 * kMiB, readers, rounds);
    std::printf(
        "\nbringing up the Nth reader of 1 GiB of shared weights (ratio = shared / own "
        "copy)\n");
    std::printf("  %6s  %15s  %17s  %7s\n", "reader", "connect+open", "own copy (H2D)", "ratio");
    reader_bring_up(connect, readers);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "reservation_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
