// answer_spin_bench: what spinning for the answer in the request mailbox buys a call through
// libgpumem, and what it costs, with 1 to many client processes: settings of
// $GPUMEM_ANSWER_SPIN_US against sleeping at once (unset, the default), measured in turns in the
// same run.
//
// Each client process connects with the setting, then makes calls back to back for the
// stretch: pings, or allocate+release pairs of 4 KiB of host memory. Printed per setting:
// calls per second (all clients), the median of the clients' p50 and p99 call times, and the
// clients' CPU time per call (what a spin burns); then the ratios against sleeping.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench_daemon.hpp"
#include "child_results.hpp"
#include "gpumem/gpumem.hpp"
#include "percentiles.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
namespace bench = gpumem::bench;

enum class call_kind { ping, allocate_release };

/// A setting of $GPUMEM_ANSWER_SPIN_US; nullptr: unset (the default: no spin, the peer).
struct setting {
  const char* label;
  const char* value;
};
constexpr setting kSettings[] = {{"sleep", nullptr}, {"spin 20us", "20"}, {"spin 50us", "50"}};

struct figures {
  double calls_per_second = 0;
  double p50_us = 0;
  double p99_us = 0;
  double cpu_us_per_call = 0;
};

double cpu_seconds(const rusage& usage) {
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

/// One client process's stretch: [calls, CPU seconds, p50 us, p99 us, seconds it ran]. A client
/// that was late to start (forks and connects on a small machine) runs for less than the stretch.
std::vector<double> client_stretch(const std::string& socket, const setting& spin, call_kind kind,
                                   clock_type::time_point start, clock_type::time_point end) {
  if (spin.value != nullptr) {
    ::setenv("GPUMEM_ANSWER_SPIN_US", spin.value, 1);
  } else {
    ::unsetenv("GPUMEM_ANSWER_SPIN_US");
  }
  auto client = gpumem::Client::connect({.socket_path = socket, .label = "answer-spin"});
  const auto call = [&] {
    if (kind == call_kind::ping) {
      client.ping();
    } else {
      (void)client.allocate(4096, {.device = gpumem::kHost});  // released at the semicolon
    }
  };
  call();  // the mailbox mapped, the first pages touched
  std::this_thread::sleep_until(start);
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  std::vector<double> micros;
  micros.reserve(1 << 20);
  const auto began = clock_type::now();
  auto now = began;
  while (now < end) {
    call();
    const auto after = clock_type::now();
    micros.push_back(std::chrono::duration<double, std::micro>(after - now).count());
    now = after;
  }
  rusage used{};
  ::getrusage(RUSAGE_SELF, &used);
  const bench::summary times = bench::summarise_blockwise(micros);
  return {static_cast<double>(micros.size()), cpu_seconds(used) - cpu_seconds(before), times.median,
          times.p99, std::chrono::duration<double>(now - began).count()};
}

figures measure(const std::string& socket, const setting& spin, call_kind kind, int clients,
                double seconds) {
  // Every client starts its clock at once, after all of them connected.
  const auto start = clock_type::now() + std::chrono::milliseconds(200 + 5 * clients);
  const auto end = start + std::chrono::duration_cast<clock_type::duration>(
                               std::chrono::duration<double>(seconds));
  std::vector<bench::running_child> children;
  for (int client = 0; client < clients; ++client) {
    children.push_back(
        bench::start_child([&] { return client_stretch(socket, spin, kind, start, end); }));
  }
  double calls = 0;
  double calls_per_second = 0;  // each client's own rate, over the time it ran
  double cpu = 0;
  std::vector<double> p50s;
  std::vector<double> p99s;
  for (const auto& child : children) {
    const auto values = bench::collect(child);
    calls += values.at(0);
    if (values.at(4) > 0) calls_per_second += values.at(0) / values.at(4);
    cpu += values.at(1);
    p50s.push_back(values.at(2));
    p99s.push_back(values.at(3));
  }
  return {calls_per_second, bench::summarise(p50s).median, bench::summarise(p99s).median,
          calls > 0 ? cpu / calls * 1e6 : 0};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Spinning for the answer in the request mailbox against sleeping at once"};
  std::string daemon = GPUMEM_BENCH_DAEMON;
  std::vector<int> client_counts{1, 4, 16, 64};
  double seconds = 0.5;
  int turns = 3;
  app.add_option("--daemon", daemon, "gpumemd binary")->check(CLI::ExistingFile);
  app.add_option("--clients", client_counts, "client process counts")->delimiter(',');
  app.add_option("--seconds", seconds, "length of one stretch")->check(CLI::PositiveNumber);
  app.add_option("--turns", turns, "stretches per setting, the settings taking turns")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const bench_daemon gpumemd(daemon, "gpumem-answer-spin-bench");
  std::printf("%u CPUs online; settings of GPUMEM_ANSWER_SPIN_US in turns, %d x %.2f s each\n",
              std::thread::hardware_concurrency(), turns, seconds);
  for (const call_kind kind : {call_kind::ping, call_kind::allocate_release}) {
    const char* kind_name = kind == call_kind::ping ? "ping" : "allocate+release 4 KiB";
    for (const int clients : client_counts) {
      std::map<const setting*, std::vector<figures>> runs;
      for (int turn = 0; turn < turns; ++turn) {
        for (const setting& spin : kSettings) {
          runs[&spin].push_back(measure(gpumemd.socket(), spin, kind, clients, seconds));
        }
      }
      // Per setting, the median of its turns for each figure.
      std::map<const setting*, figures> median;
      for (const auto& [spin, taken] : runs) {
        const auto of = [&](double figures::*field) {
          std::vector<double> values;
          for (const auto& one : taken) values.push_back(one.*field);
          return bench::summarise(values).median;
        };
        median[spin] = {of(&figures::calls_per_second), of(&figures::p50_us), of(&figures::p99_us),
                        of(&figures::cpu_us_per_call)};
      }
      const figures& asleep = median[&kSettings[0]];
      for (const setting& spin : kSettings) {
        const figures& f = median[&spin];
        std::printf(
            "%-24s %3d clients  %-10s %10.0f calls/s  p50 %7.1f us  p99 %7.1f us  "
            "client CPU %6.2f us/call",
            kind_name, clients, spin.label, f.calls_per_second, f.p50_us, f.p99_us,
            f.cpu_us_per_call);
        if (&spin != &kSettings[0]) {
          std::printf("  | vs sleep: rate %.2f, p50 %.2f, CPU %.2f",
                      f.calls_per_second / asleep.calls_per_second, f.p50_us / asleep.p50_us,
                      f.cpu_us_per_call / asleep.cpu_us_per_call);
        }
        std::printf("\n");
      }
    }
  }
  return 0;
}
