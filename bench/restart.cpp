// Restart benchmark: gpumemd under a stand-in for systemd (tests/support/systemd_supervisor: fd
// store, socket activation) is SIGKILLed and started again while client processes hold N named
// 4 KiB host buffers; prints, for N = 10, 1,000 and 10,000:
//   1. SIGKILL -> first served request: a new client connects and pings, as it sees it
//      (the supervisor's noticing the death and starting the daemon included);
//   2. how long a client's call is held up when a restart falls in it (a client pinging in a
//      loop), against its median call;
//   3. the reference, measured in the same run: reading the same bytes back from a file into
//      a new allocation, the reload a restart costs without a surviving daemon;
//   4. what keeping the state costs a request: allocate+release round trips with the fd store
//      against the same daemon without NOTIFY_SOCKET.
//
//   restart_bench [--objects 10,1000,10000] [--restarts 5] [--daemon PATH] [--log-level LEVEL]
//   restart_bench hold SOCKET FIRST COUNT   (internal: a holder process, started by the above)
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_daemon.hpp"
#include "cpu_placement.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "support/child_process.hpp"
#include "support/pattern.hpp"
#include "support/systemd_supervisor.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using gpumem::testing::child_process;
using gpumem::testing::systemd_supervisor;

constexpr std::size_t kObjectBytes = 4096;
/// Each holder process holds at most this many objects: 10,000 are held by four.
constexpr std::size_t kObjectsPerHolder = 2500;
/// Objects opened and checked after each restart, spread over all of them.
constexpr std::size_t kObjectsChecked = 100;
constexpr int kCallDelayRestarts = 3;
constexpr auto kPingingAround = std::chrono::milliseconds(100);
/// Round trips are timed in blocks, alternating between the two daemons, so that what else the
/// machine does weighs on both alike.
constexpr int kRoundTripBlocks = 10;
constexpr int kRoundTripsPerBlock = 1000;
constexpr int kReloads = 5;
constexpr std::size_t kGoalObjects = 10000;
constexpr double kGoalMilliseconds = 100;

double milliseconds(clock_type::duration span) {
  return std::chrono::duration<double, std::milli>(span).count();
}
double microseconds(clock_type::duration span) {
  return std::chrono::duration<double, std::micro>(span).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}
double maximum(const std::vector<double>& values) {
  return values.empty() ? 0 : *std::max_element(values.begin(), values.end());
}
double mean(const std::vector<double>& values) {
  return values.empty() ? 0 : std::accumulate(values.begin(), values.end(), 0.0) / values.size();
}

std::string object_name(std::size_t index) {
  return "bench.object." + std::to_string(index);
}
std::uint32_t seed_of(std::size_t index) {
  return static_cast<std::uint32_t>(index);
}

[[noreturn]] void hold(const std::string& socket, std::size_t first, std::size_t count) {
  auto client = gpumem::Client::connect({.socket_path = socket, .label = "bench-holder"});
  std::vector<gpumem::Buffer> held;
  held.reserve(count);
  for (std::size_t index = first; index < first + count; ++index) {
    held.push_back(client.allocate(kObjectBytes, {.name = object_name(index)}));
    gpumem::testing::fill_pattern(held.back().data(), kObjectBytes, seed_of(index));
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) ::pause();
}

/// Holder processes for objects 0..count-1, each ready (its objects made and filled).
std::vector<child_process> start_holders(const std::string& socket, std::size_t count) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<child_process> holders;
  for (std::size_t first = 0; first < count; first += kObjectsPerHolder) {
    const std::size_t share = std::min(kObjectsPerHolder, count - first);
    holders.emplace_back(std::vector<std::string>{self, "hold", socket, std::to_string(first),
                                                  std::to_string(share)});
  }
  for (auto& holder : holders) {
    if (holder.read_line(std::chrono::seconds(60)) != "ready") {
      throw std::runtime_error("a holder process did not make its objects");
    }
  }
  return holders;
}

/// Opens objects spread over 0..count-1 by name and checks their bytes; how many it checked.
std::size_t check_objects(const std::string& socket, std::size_t count) {
  auto client = gpumem::Client::connect({.socket_path = socket, .label = "bench-check"});
  const std::size_t step = std::max<std::size_t>(1, count / kObjectsChecked);
  std::size_t checked = 0;
  for (std::size_t index = 0; index < count; index += step, ++checked) {
    auto buffer = client.open(object_name(index));
    if (buffer.size() != kObjectBytes ||
        gpumem::testing::first_mismatch(buffer.data(), kObjectBytes, seed_of(index)) !=
            kObjectBytes) {
      throw std::runtime_error(object_name(index) + " lost its bytes in the restart");
    }
  }
  return checked;
}

struct restart_timing {
  double noticed_ms;  // SIGKILL -> the supervisor sees the daemon dead
  double ready_ms;    // SIGKILL -> READY=1 handled by the supervisor
  double served_ms;   // SIGKILL -> a new client's ping answered
};

struct restart_steps {
  clock_type::time_point killed;
  clock_type::time_point noticed;
  clock_type::time_point ready;
};

/// SIGKILLs the daemon and starts it again as systemd would (on the death, at once), with
/// @p during running on its own thread from the instant after the SIGKILL.
template <typename Work>
restart_steps restart(systemd_supervisor& daemon, Work during) {
  std::atomic<bool> killed = false;
  std::exception_ptr failure;
  std::thread worker([&] {
    killed.wait(false);
    try {
      during();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  restart_steps steps;
  const pid_t pid = daemon.pid();
  steps.killed = clock_type::now();
  ::kill(pid, SIGKILL);
  killed = true;
  killed.notify_one();
  // Waits for the death without reaping: start() reaps it and handles its last notifications.
  siginfo_t info{};
  ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT);
  steps.noticed = clock_type::now();
  daemon.start();
  steps.ready = clock_type::now();
  worker.join();
  if (failure) std::rethrow_exception(failure);
  return steps;
}

restart_timing restart_to_first_request(systemd_supervisor& daemon) {
  clock_type::time_point served;
  const restart_steps steps = restart(daemon, [&] {
    // Connects into the backlog of the socket the supervisor keeps, and waits there.
    auto client = gpumem::Client::connect({.socket_path = daemon.socket_path(), .label = "first"});
    client.ping();
    served = clock_type::now();
  });
  return {milliseconds(steps.noticed - steps.killed), milliseconds(steps.ready - steps.killed),
          milliseconds(served - steps.killed)};
}

struct call_delay {
  double median_call_us;
  double longest_call_ms;
};

/// A client pings in a loop from before a restart to after it.
call_delay call_across_restart(systemd_supervisor& daemon) {
  auto client = gpumem::Client::connect({.socket_path = daemon.socket_path(), .label = "pinger"});
  std::vector<double> calls;
  calls.reserve(1 << 20);
  std::atomic<bool> stop = false;
  std::thread pinger([&] {
    while (!stop.load(std::memory_order_relaxed) && calls.size() < calls.capacity()) {
      const auto sent = clock_type::now();
      client.ping();
      calls.push_back(microseconds(clock_type::now() - sent));
    }
  });
  std::this_thread::sleep_for(kPingingAround);
  restart(daemon, [] {});
  std::this_thread::sleep_for(kPingingAround);
  stop = true;
  pinger.join();
  return {median(calls), maximum(calls) / 1000};
}

struct round_trips {
  double median_us;
  double p99_us;
  double mean_us;
  double max_us;
};

round_trips summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples[samples.size() * 99 / 100], mean(samples),
          samples.back()};
}

gpumem::Client round_trip_client(const std::string& socket) {
  auto client = gpumem::Client::connect({.socket_path = socket, .label = "bench-rtt"});
  client.allocate(kObjectBytes).release();  // imports the pool before the clock starts
  return client;
}

void time_allocate_release(gpumem::Client& client, std::vector<double>& into) {
  for (int i = 0; i < kRoundTripsPerBlock; ++i) {
    const auto sent = clock_type::now();
    client.allocate(kObjectBytes).release();
    into.push_back(microseconds(clock_type::now() - sent));
  }
}

/// The objects' bytes in one file, as a user would have saved them.
std::string write_objects_file(std::size_t count) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("gpumem-restart-bench-" + std::to_string(::getpid()) + ".bin"))
                               .string();
  std::vector<std::uint8_t> bytes(count * kObjectBytes);
  for (std::size_t index = 0; index < count; ++index) {
    gpumem::testing::fill_pattern(bytes.data() + index * kObjectBytes, kObjectBytes,
                                  seed_of(index));
  }
  const gpumem::unique_fd file(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!file ||
      ::write(file.get(), bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    throw std::runtime_error("cannot write " + path);
  }
  return path;
}

/// Reads @p path into a new gpumemd allocation of its size: the whole reload, from the open.
double reload_ms(const std::string& path, std::size_t bytes, gpumem::Client& client) {
  const auto start = clock_type::now();
  auto buffer = client.allocate(bytes);
  const gpumem::unique_fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  auto* into = static_cast<std::uint8_t*>(buffer.data());
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::read(file.get(), into + done, bytes - done);
    if (got <= 0) throw std::runtime_error("cannot read " + path);
    done += static_cast<std::size_t>(got);
  }
  const double elapsed = milliseconds(clock_type::now() - start);
  if (gpumem::testing::first_mismatch(into, kObjectBytes, seed_of(0)) != kObjectBytes) {
    throw std::runtime_error("the reload read other bytes");
  }
  return elapsed;
}

struct row {
  std::size_t objects = 0;
  std::size_t holders = 0;
  std::vector<restart_timing> restarts;
  std::size_t checked = 0;
  std::vector<call_delay> delays;
  std::vector<double> reloads;
  std::optional<round_trips> kept;
  std::optional<round_trips> plain;
  std::string placement;
};

row measure(const std::string& daemon_binary, const std::string& log_level, std::size_t objects,
            int restarts, bool with_round_trips) {
  row result;
  result.objects = objects;
  {
    systemd_supervisor daemon({.binary = daemon_binary});
    daemon.set_args({"--socket", daemon.socket_path(), "--log-level", log_level});
    daemon.start();
    const auto holders = start_holders(daemon.socket_path(), objects);
    result.holders = holders.size();
    for (int i = 0; i < restarts; ++i) {
      result.restarts.push_back(restart_to_first_request(daemon));
      result.checked = check_objects(daemon.socket_path(), objects);
    }
    for (int i = 0; i < kCallDelayRestarts; ++i) {
      result.delays.push_back(call_across_restart(daemon));
    }
    if (with_round_trips) {
      bench_daemon plain(daemon_binary, "gpumem-restart-bench");
      const auto plain_holders = start_holders(plain.socket(), objects);
      // Measured on one CPU: across two, a round trip on the development VM is two wake-ups of an
      // idle core (~100 us), in which the few microseconds the state adds are lost.
      const cpu_placement placement({daemon.pid(), plain.pid()}, cpu_placement::sides::together);
      result.placement = placement.report();
      auto kept_client = round_trip_client(daemon.socket_path());
      auto plain_client = round_trip_client(plain.socket());
      std::vector<double> kept;
      std::vector<double> unkept;
      for (int block = 0; block < kRoundTripBlocks; ++block) {
        time_allocate_release(kept_client, kept);
        time_allocate_release(plain_client, unkept);
      }
      result.kept = summarize(std::move(kept));
      result.plain = summarize(std::move(unkept));
    }

    const std::string path = write_objects_file(objects);
    auto client = gpumem::Client::connect({.socket_path = daemon.socket_path(), .label = "reload"});
    for (int i = 0; i < kReloads; ++i) {
      result.reloads.push_back(reload_ms(path, objects * kObjectBytes, client));
    }
    std::filesystem::remove(path);
    if (log_level != "warn") std::fputs(daemon.log_tail(1 << 20).c_str(), stderr);
  }
  return result;
}

void print(const std::vector<row>& rows, int restarts) {
  std::printf(
      "\n1. SIGKILL -> first served request (a new client connects and pings), %d restarts\n",
      restarts);
  std::printf("%8s %8s %10s %10s %14s %14s %10s\n", "objects", "holders", "median_ms", "max_ms",
              "noticed_ms", "ready=1_ms", "checked");
  for (const row& each : rows) {
    std::vector<double> served, noticed, ready;
    for (const auto& timing : each.restarts) {
      served.push_back(timing.served_ms);
      noticed.push_back(timing.noticed_ms);
      ready.push_back(timing.ready_ms);
    }
    std::printf("%8zu %8zu %10.1f %10.1f %14.2f %14.1f %10zu\n", each.objects, each.holders,
                median(served), maximum(served), median(noticed), median(ready), each.checked);
  }
  std::printf(
      "   noticed, ready=1: medians of when the supervisor saw the death and READY=1;\n"
      "   checked: objects opened by name after each restart, bytes compared\n");

  std::printf("\n2. a client pinging in a loop while the daemon restarts, %d restarts\n",
              kCallDelayRestarts);
  std::printf("%8s %16s %20s %18s %12s\n", "objects", "median_call_us", "longest_call_ms",
              "longest_max_ms", "ratio");
  for (const row& each : rows) {
    std::vector<double> medians, longest;
    for (const auto& delay : each.delays) {
      medians.push_back(delay.median_call_us);
      longest.push_back(delay.longest_call_ms);
    }
    std::printf("%8zu %16.1f %20.1f %18.1f %12.0f\n", each.objects, median(medians),
                median(longest), maximum(longest), median(longest) * 1000 / median(medians));
  }
  std::printf(
      "   longest_call_ms: median over the restarts of the longest call (the one the\n"
      "   restart fell in); ratio: that against the median call\n");

  std::printf(
      "\n3. reference: the same bytes read from a file (%s, page cache warm: dropping it\n"
      "   needs root) into a new gpumemd allocation, %d reloads\n",
      std::filesystem::temp_directory_path().c_str(), kReloads);
  std::printf("%8s %10s %12s %12s %16s %16s\n", "objects", "MiB", "reload_ms", "restart_ms",
              "restart/reload", "bytes_reloaded");
  for (const row& each : rows) {
    std::vector<double> served;
    for (const auto& timing : each.restarts) served.push_back(timing.served_ms);
    std::printf("%8zu %10.2f %12.2f %12.1f %16.2f %16d\n", each.objects,
                static_cast<double>(each.objects * kObjectBytes) / (1 << 20), median(each.reloads),
                median(served), median(served) / median(each.reloads), 0);
  }
  std::printf(
      "   restart_ms: the median of 1.; bytes_reloaded: what the restart read back (the\n"
      "   objects stay in the memory the fd store keeps)\n");

  std::printf(
      "\n4. allocate+release round trip, state kept (fd store) vs the same daemon without\n"
      "   NOTIFY_SOCKET (live objects held in each), %d round trips each, alternating\n",
      kRoundTripBlocks * kRoundTripsPerBlock);
  std::printf("%8s %-11s %10s %10s %10s %10s\n", "objects", "state", "p50_us", "p99_us", "mean_us",
              "max_us");
  for (const row& each : rows) {
    if (!each.kept || !each.plain) continue;
    const auto line = [&](const char* state, const round_trips& figures) {
      std::printf("%8zu %-11s %10.1f %10.1f %10.1f %10.0f\n", each.objects, state,
                  figures.median_us, figures.p99_us, figures.mean_us, figures.max_us);
    };
    std::printf("%8zu placement: %s\n", each.objects, each.placement.c_str());
    line("kept", *each.kept);
    line("not kept", *each.plain);
    std::printf("%8zu %-11s %10.2f %10.2f %10.2f %10.2f\n", each.objects, "ratio",
                each.kept->median_us / each.plain->median_us,
                each.kept->p99_us / each.plain->p99_us, each.kept->mean_us / each.plain->mean_us,
                each.kept->max_us / each.plain->max_us);
  }

  std::printf("\nverdicts\n");
  for (const row& each : rows) {
    if (each.objects != kGoalObjects) continue;
    std::vector<double> served;
    for (const auto& timing : each.restarts) served.push_back(timing.served_ms);
    const bool all_under = maximum(served) < kGoalMilliseconds;
    const bool median_under = median(served) < kGoalMilliseconds;
    std::printf("goal: restart with 10,000 objects under 100 ms: median %.1f ms, max %.1f ms: %s\n",
                median(served), maximum(served),
                all_under      ? "met"
                : median_under ? "met at the median, missed by the slowest restart"
                               : "missed");
  }
  std::string checked;
  for (const row& each : rows) {
    checked += (checked.empty() ? "" : ", ") + std::to_string(each.checked);
  }
  std::printf(
      "goal: zero bytes reloaded: 0 bytes reloaded; after every restart objects were opened "
      "by name\n      and had their bytes (%s per row): met\n",
      checked.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "hold") {
    hold(argv[2], std::stoull(argv[3]), std::stoull(argv[4]));
  }
  CLI::App app{"gpumemd restart benchmark"};
  std::vector<std::size_t> object_counts{10, 1000, 10000};
  int restarts = 5;
  std::string daemon = GPUMEM_BENCH_DAEMON;
  std::string log_level = "warn";
  app.add_option("--objects", object_counts, "live objects per row")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--restarts", restarts, "restarts timed per row")->check(CLI::PositiveNumber);
  app.add_option("--daemon", daemon, "gpumemd binary")->check(CLI::ExistingFile);
  app.add_option("--log-level", log_level,
                 "the supervised daemon's log level; at any but warn its log is copied to stderr");
  CLI11_PARSE(app, argc, argv);

  std::printf(
      "restart_bench: gpumemd under a stand-in for systemd (fd store, socket activation),\n"
      "named %zu-byte host buffers held by live client processes\n",
      kObjectBytes);
  std::fflush(stdout);
  try {
    std::vector<row> rows;
    for (const std::size_t objects : object_counts) {
      const bool with_round_trips =
          objects == object_counts.front() || objects == object_counts.back();
      rows.push_back(measure(daemon, log_level, objects, restarts, with_round_trips));
    }
    print(rows, restarts);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "restart_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
