#include "driver.hpp"

#include <signal.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "worker.hpp"

namespace gpumem::soak {

namespace {

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// How long the daemon gets to clean up after the last worker before leftovers are leaks.
constexpr auto kSettleTime = 10s;
/// A worker reports every 100 ms; one silent for longer than this is busy in some operation.
constexpr auto kLively = 1s;

struct worker_process {
  std::unique_ptr<testing::child_process> process;
  worker_report last;  ///< from its latest line
  clock::time_point heard;
};

struct daemon_size {
  std::uint64_t rss_kib = 0;
  std::size_t fds = 0;
};

struct leftovers {
  std::uint64_t bytes = 0;
  std::uint64_t allocations = 0;
  std::size_t reservations = 0;
  std::size_t sync_objects = 0;
  std::size_t other_clients = 0;
  bool none() const {
    return bytes == 0 && allocations == 0 && reservations == 0 && sync_objects == 0 &&
           other_clients == 0;
  }
};

std::uint64_t resident_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

class soak {
 public:
  explicit soak(const soak_options& options)
      : options_(options), random_(options.seed), watcher_(daemon_.connect("soak-driver")) {}

  int run() {
    const auto warm_up = std::max<std::chrono::seconds>(3s, options_.duration / 10);
    const auto started = clock::now();
    workers_.resize(options_.clients);
    run_phase(warm_up);
    stop_all();
    const leftovers after_warm_up = settle();
    const daemon_size baseline = measure();
    run_phase(options_.duration - warm_up);
    stop_all();
    const leftovers left = settle();
    const daemon_size final_size = measure();
    const double minutes = std::chrono::duration<double>(clock::now() - started).count() / 60;
    bool alive = true;
    try {
      watcher_.ping();
    } catch (const Error& error) {
      alive = false;
      std::fprintf(stderr, "soak: the daemon does not answer: %s\n", error.what());
    }

    const bool rss_ok = final_size.rss_kib <= baseline.rss_kib + options_.rss_tolerance_kib;
    const bool fds_ok = final_size.fds <= baseline.fds + options_.fd_tolerance;
    const bool passed = alive && left.none() && after_warm_up.none() && hangs_ == 0 &&
                        totals_.unexpected == 0 && totals_.slow == 0 && rss_ok && fds_ok;
    std::printf("soak: %lld s, %u clients, seed %" PRIu64 "\n",
                static_cast<long long>(options_.duration.count()), options_.clients, options_.seed);
    std::printf("  operations      %" PRIu64 " (%.0f/s)\n", totals_.ops,
                totals_.ops / minutes / 60);
    std::printf("  SIGKILLs        %" PRIu64 " (%.0f per minute), workers started %" PRIu64 "\n",
                kills_, kills_ / minutes, started_);
    std::printf("  unexpected      %" PRIu64 " errors, %" PRIu64 " slow operations, %" PRIu64
                " hangs\n",
                totals_.unexpected, totals_.slow, hangs_);
    std::printf("  leaked          %" PRIu64 " bytes, %" PRIu64
                " allocations, %zu reservations, %zu sync objects, %zu clients\n",
                left.bytes, left.allocations, left.reservations, left.sync_objects,
                left.other_clients);
    std::printf("  daemon          %s; RSS %" PRIu64 " KiB after warm-up, %" PRIu64
                " KiB at the end (up to +%" PRIu64 " KiB allowed); fds %zu, %zu (up to +%zu)\n",
                alive ? "alive" : "NOT ANSWERING", baseline.rss_kib, final_size.rss_kib,
                options_.rss_tolerance_kib, baseline.fds, final_size.fds, options_.fd_tolerance);
    std::printf("  result          %s\n", passed ? "PASS" : "FAIL");
    return passed ? 0 : 1;
  }

 private:
  void start(worker_process& slot) {
    slot.process = std::make_unique<testing::child_process>(
        std::vector<std::string>{options_.worker_binary, "worker", "--socket",
                                 daemon_.socket_path(), "--seed", std::to_string(random_())});
    slot.last = {};
    slot.heard = clock::now();
    ++started_;
  }

  static std::optional<worker_report> parse(const std::string& line) {
    std::istringstream in(line);
    std::string what;
    worker_report report;
    if (in >> what >> report.ops >> report.unexpected >> report.slow) return report;
    return std::nullopt;
  }

  /// Reads what @p slot wrote so far (all of it, once its process has ended).
  void drain(worker_process& slot) {
    // read_line waits whole milliseconds, and less than 2 ms rounds down to none at all.
    while (const auto line = slot.process->read_line(2ms)) {
      if (const auto report = parse(*line)) {
        slot.last = *report;
        slot.heard = clock::now();
      }
    }
  }

  /// Adds what the ended worker of @p slot did to the totals.
  void account(worker_process& slot) {
    drain(slot);
    totals_.ops += slot.last.ops;
    totals_.unexpected += slot.last.unexpected;
    totals_.slow += slot.last.slow;
    slot.process.reset();
  }

  void kill_and_restart(worker_process& slot) {
    slot.process->signal(SIGKILL);
    slot.process->wait(options_.hang_after);
    account(slot);
    start(slot);
  }

  /// A random worker among those that reported lately: one that is stuck is left alone, so
  /// that it stays stuck until it counts as hung instead of being killed out of sight.
  worker_process* pick_victim() {
    std::vector<worker_process*> lively;
    for (auto& slot : workers_) {
      if (clock::now() - slot.heard < kLively) lively.push_back(&slot);
    }
    return lively.empty() ? nullptr : lively[random_() % lively.size()];
  }

  void run_phase(std::chrono::nanoseconds length) {
    for (auto& slot : workers_) start(slot);
    const auto end = clock::now() + length;
    auto next_kill = clock::now() + options_.kill_interval;
    while (clock::now() < end) {
      for (auto& slot : workers_) {
        drain(slot);
        if (clock::now() - slot.heard > options_.hang_after) {
          ++hangs_;
          std::fprintf(stderr, "soak: worker %d silent for %lld s: hung\n", slot.process->pid(),
                       static_cast<long long>(options_.hang_after.count()));
          kill_and_restart(slot);
        }
      }
      if (clock::now() >= next_kill) {
        if (worker_process* victim = pick_victim()) {
          kill_and_restart(*victim);
          ++kills_;
        }
        next_kill += options_.kill_interval;
      }
      std::this_thread::sleep_for(10ms);
    }
  }

  /// Asks every worker to let go and end; one that does not end in time is hung.
  void stop_all() {
    for (auto& slot : workers_) slot.process->signal(SIGTERM);
    const auto deadline = clock::now() + options_.hang_after;
    for (auto& slot : workers_) {
      const auto left = std::max<clock::duration>(0ms, deadline - clock::now());
      if (!slot.process->wait(std::chrono::duration_cast<std::chrono::milliseconds>(left))) {
        ++hangs_;
        std::fprintf(stderr, "soak: worker %d did not end within %lld s of SIGTERM: hung\n",
                     slot.process->pid(), static_cast<long long>(options_.hang_after.count()));
      }
      account(slot);
    }
  }

  leftovers count_left() {
    leftovers left;
    const Stats stats = watcher_.stats();
    for (const PoolStats& pool : stats.pools) left.bytes += pool.bytes_in_use;
    left.allocations = stats.allocations;
    left.reservations = watcher_.reservations().size();
    left.sync_objects = watcher_.sync_objects().size();
    left.other_clients = watcher_.clients().size() - 1;
    return left;
  }

  /// A lock whose holder was SIGKILLed holding it, and that no worker took since, is kept
  /// (owner-died) by design until someone repairs it. A client of its own does, as a user
  /// would, and goes (the watcher never attaches to the lock page, which would keep it), so
  /// that only true leftovers count.
  void repair_orphaned_locks() {
    std::optional<Client> repairer;
    for (const SyncInfo& each : watcher_.sync_objects()) {
      if (each.kind != SyncKind::lock || !each.owner_died || each.attached != 0) continue;
      if (!repairer) repairer.emplace(daemon_.connect("soak-repairer"));
      Lock lock = repairer->lock(each.name);
      if (!lock.try_lock()) continue;
      if (lock.owner_died()) lock.mark_consistent();
      lock.unlock();
    }
  }

  /// What is left once the daemon had time to notice that every worker is gone.
  leftovers settle() {
    const auto deadline = clock::now() + kSettleTime;
    repair_orphaned_locks();
    leftovers left = count_left();
    while (!left.none() && clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
      repair_orphaned_locks();
      left = count_left();
    }
    return left;
  }

  daemon_size measure() const { return {resident_kib(daemon_.pid()), daemon_.open_fd_count()}; }

  soak_options options_;
  std::mt19937_64 random_;
  testing::daemon_process daemon_;
  Client watcher_;
  std::vector<worker_process> workers_;
  worker_report totals_;
  std::uint64_t kills_ = 0;
  std::uint64_t hangs_ = 0;
  std::uint64_t started_ = 0;
};

}  // namespace

int run_soak(const soak_options& options) {
  // Every death breaks a barrier, which the daemon logs as a warning: errors only, unless the
  // caller asked for more.
  ::setenv("GPUMEM_TEST_LOG", "error", /*overwrite=*/0);
  return soak(options).run();
}

}  // namespace gpumem::soak
