// Control-plane benchmark: N client processes send small requests to one gpumemd as fast as
// they can for a fixed time; prints requests/s and latency percentiles, and, when redis is
// installed, the same figure for redis-benchmark's GET on a Unix socket, measured in this run.
//
//   control_plane [--seconds S] [--clients 1,16,64] [--daemon PATH]
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/gpumem.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t kMaxSamplesPerClient = 200000;

enum class workload { ping, allocate_free };

const char* name_of(workload w) {
  return w == workload::ping ? "ping" : "allocate+free";
}

// What each child leaves for the parent, in memory shared across fork().
struct client_result {
  std::uint64_t requests;
  std::uint64_t samples;
  std::uint64_t failed;
  float latency_us[kMaxSamplesPerClient];  // per request
};

struct run_result {
  double requests_per_second;
  double p50_us;
  double p99_us;
  std::uint64_t failed;
};

void run_client(const std::string& socket, workload kind, clock_type::time_point start,
                clock_type::time_point stop, client_result& out) {
  auto client = gpumem::Client::connect({.socket_path = socket, .label = "bench"});
  client.allocate(4096).release();  // imports the pool before the clock starts
  std::this_thread::sleep_until(start);
  const auto record = [&](clock_type::time_point since) {
    const float us = std::chrono::duration<float, std::micro>(clock_type::now() - since).count();
    if (out.samples < kMaxSamplesPerClient) out.latency_us[out.samples++] = us;
    ++out.requests;
  };
  while (clock_type::now() < stop) {
    try {
      auto t0 = clock_type::now();
      if (kind == workload::ping) {
        client.ping();
        record(t0);
      } else {
        auto buffer = client.allocate(4096);
        record(t0);
        t0 = clock_type::now();
        buffer.release();
        record(t0);
      }
    } catch (const gpumem::Error&) {
      ++out.failed;
    }
  }
}

run_result run(const std::string& socket, workload kind, int clients, double seconds) {
  const std::size_t bytes = sizeof(client_result) * static_cast<std::size_t>(clients);
  void* shared = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) throw std::runtime_error("mmap of the result area failed");
  auto* results = static_cast<client_result*>(shared);
  // Every child connects first; the clock starts for all of them at once, 300 ms from now.
  const auto start = clock_type::now() + std::chrono::milliseconds(300 + 10 * clients);
  const auto stop = start + std::chrono::duration_cast<clock_type::duration>(
                                std::chrono::duration<double>(seconds));
  std::vector<pid_t> children;
  for (int i = 0; i < clients; ++i) {
    const pid_t child = ::fork();
    if (child == 0) {
      results[i] = {};
      try {
        run_client(socket, kind, start, stop, results[i]);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "client %d: %s\n", i, error.what());
        ::_exit(1);
      }
      ::_exit(0);
    }
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw std::runtime_error("a benchmark client failed");
    }
  }
  std::vector<float> all;
  run_result result{};
  std::uint64_t requests = 0;
  for (int i = 0; i < clients; ++i) {
    requests += results[i].requests;
    result.failed += results[i].failed;
    all.insert(all.end(), results[i].latency_us, results[i].latency_us + results[i].samples);
  }
  ::munmap(shared, bytes);
  std::sort(all.begin(), all.end());
  const auto percentile = [&](double p) {
    return all.empty() ? 0.0
                       : all[std::min(all.size() - 1, static_cast<std::size_t>(p * all.size()))];
  };
  result.requests_per_second = static_cast<double>(requests) / seconds;
  result.p50_us = percentile(0.50);
  result.p99_us = percentile(0.99);
  return result;
}

// A child process that is SIGTERMed and reaped when the owner goes.
struct server_process {
  pid_t pid = -1;
  explicit server_process(std::vector<std::string> argv) {
    pid = ::fork();
    if (pid == 0) {
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
  }
  ~server_process() {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
  }
};

bool wait_for_socket(const std::string& path) {
  for (int i = 0; i < 400; ++i) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::optional<std::string> find_program(const std::string& name) {
  std::istringstream path(std::getenv("PATH") ? std::getenv("PATH") : "");
  for (std::string folder; std::getline(path, folder, ':');) {
    const auto candidate = std::filesystem::path(folder) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return std::nullopt;
}

/// redis-benchmark's GET rate against a fresh redis-server on a Unix socket, if both exist.
std::optional<double> redis_get_rate(const std::string& folder, int clients) {
  const auto server = find_program("redis-server");
  const auto bench = find_program("redis-benchmark");
  if (!server || !bench) return std::nullopt;
  const std::string socket = folder + "/redis.sock";
  server_process redis({*server, "--port", "0", "--unixsocket", socket, "--save", "",
                        "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"});
  if (!wait_for_socket(socket)) return std::nullopt;
  const std::string command = *bench + " -s " + socket + " -c " + std::to_string(clients) +
                              " -t get -n " + std::to_string(40000 + 4000 * clients) + " -q 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string output;
  std::array<char, 512> chunk{};
  while (std::fgets(chunk.data(), chunk.size(), pipe) != nullptr) output += chunk.data();
  ::pclose(pipe);
  std::smatch match;
  // "GET: 123456.79 requests per second, p50=0.247 msec"; the last figure printed is final.
  const std::regex rate(R"(GET: ([0-9.]+) requests per second)");
  std::optional<double> last;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), rate);
       it != std::sregex_iterator(); ++it) {
    last = std::stod((*it)[1]);
  }
  return last;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpumemd control-plane benchmark"};
  double seconds = 2;
  std::vector<int> client_counts{1, 16, 64};
  std::string daemon = GPUMEM_BENCH_DAEMON;
  app.add_option("--seconds", seconds, "time per measurement")->check(CLI::PositiveNumber);
  app.add_option("--clients", client_counts, "client process counts")->delimiter(',');
  app.add_option("--daemon", daemon, "gpumemd binary")->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);

  char pattern[] = "/tmp/gpumem-bench-XXXXXX";
  const std::string folder = ::mkdtemp(pattern);
  const std::string socket = folder + "/gpumemd.sock";
  int status = 0;
  {
    server_process gpumemd({daemon, "--socket", socket, "--log-level", "warn"});
    if (!wait_for_socket(socket)) {
      std::fprintf(stderr, "gpumemd did not start\n");
      return 1;
    }
    std::printf("%-8s %-14s %14s %10s %10s %8s\n", "clients", "workload", "requests/s", "p50_us",
                "p99_us", "failed");
    std::optional<double> ping_rate_at_most_clients;
    for (workload kind : {workload::ping, workload::allocate_free}) {
      for (int clients : client_counts) {
        const auto r = run(socket, kind, clients, seconds);
        std::printf("%-8d %-14s %14.0f %10.1f %10.1f %8llu\n", clients, name_of(kind),
                    r.requests_per_second, r.p50_us, r.p99_us,
                    static_cast<unsigned long long>(r.failed));
        std::fflush(stdout);
        if (kind == workload::ping && clients == client_counts.back()) {
          ping_rate_at_most_clients = r.requests_per_second;
        }
        status |= r.failed != 0;
      }
    }
    const int most = client_counts.back();
    if (const auto redis = redis_get_rate(folder, most)) {
      std::printf("redis-benchmark -c %d -t get (Unix socket, same run): %.0f requests/s\n", most,
                  *redis);
      std::printf("ratio gpumemd ping / redis GET at %d clients: %.2f\n", most,
                  *ping_rate_at_most_clients / *redis);
    } else {
      std::printf("redis-server or redis-benchmark not installed: no ratio printed\n");
    }
  }
  std::filesystem::remove_all(folder);
  return status;
}
