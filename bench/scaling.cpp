// Scaling curves: how the cost of a request grows as the node fills up. For each size it prints
// the p50 and p99 of a request and their ratio to the smallest size (the goal: at the
// largest size every p50 within 1.2x and every p99 within 1.5x of the smallest):
//   - allocate / open by name (from another client) / release, with 10^2 ... 10^6 live host
//     allocations held by holder processes (each under vm.max_map_count mappings);
//   - opening a new lock by name, the uncontended lock()+unlock() and closing it, with
//     10 ... 10^4 locks existing;
//   - a busy client's ping and allocate+release with 1 ... 1000 idle connected clients;
//   - per client, the time for 10 ... 1000 forked clients to connect, allocate and exit (their
//     destructors run, or SIGKILL) until the daemon holds nothing of theirs, checked by stats
//     (five waves a size, the sizes taking turns).
// The daemon runs with only a host pool (CUDA_VISIBLE_DEVICES=-1) and no quotas. Every party is
// a forked process with its own connection; the parent never connects.
//
//   scaling_bench [--daemon PATH] [--quick] [--parts allocations,locks,idle,churn]
//                 [--max-allocations N] [--max-locks N] [--max-idle N] [--max-churn N]
//                 [--samples N] [--no-pin]
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_daemon.hpp"
#include "child_results.hpp"
#include "cpu_placement.hpp"
#include "gpumem/gpumem.hpp"
#include "percentiles.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using gpumem::bench::summarise_blockwise;
using gpumem::bench::summary;

double micros_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
}

/// Below vm.max_map_count (65530 by default): every host allocation a client holds is a mapping.
constexpr std::uint64_t kAllocationsPerHolder = 50'000;
/// Idle connections one process keeps open.
constexpr std::uint64_t kConnectionsPerIdleProcess = 100;

/// Sizes cycle through 64 B ... 4 KiB.
std::size_t small_size(std::uint64_t i) {
  return std::size_t{64} << (i % 7);
}

// ---- forked workers -------------------------------------------------------------------------

void write_all(int fd, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("a worker's pipe broke");
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
}

bool read_all(int fd, void* data, std::size_t size) {
  auto* bytes = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

/// What the parent asks of a worker: an operation of its own and two numbers.
struct command {
  std::uint32_t op;
  std::uint64_t count;
  std::uint64_t round;
};
constexpr std::uint32_t kQuit = 0;

/// The parent's ends of every worker's pipes: a child closes them, so that a worker that dies
/// is seen as a broken pipe rather than waited for.
std::vector<int>& parent_fds() {
  static std::vector<int> fds;
  return fds;
}

void close_parent_fds() {
  for (const int fd : parent_fds()) ::close(fd);
  parent_fds().clear();
}

/// A forked process with its own connection that runs the parent's commands one at a time and
/// answers each with a list of figures.
class worker {
 public:
  using handler = std::function<std::vector<double>(const command&)>;

  /// @param setup runs in the child (where it connects) and returns what serves the commands.
  explicit worker(const std::function<handler()>& setup) {
    int commands[2];
    int results[2];
    if (::pipe(commands) != 0 || ::pipe(results) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      ::close(commands[1]);
      ::close(results[0]);
      close_parent_fds();
      ::_exit(serve(setup, commands[0], results[1]));
    }
    ::close(commands[0]);
    ::close(results[1]);
    to_ = commands[1];
    from_ = results[0];
    parent_fds().push_back(to_);
    parent_fds().push_back(from_);
  }
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;
  ~worker() {
    try {
      send({kQuit, 0, 0});
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): it is gone already
    }
    std::erase_if(parent_fds(), [this](int fd) { return fd == to_ || fd == from_; });
    ::close(to_);
    ::close(from_);
    ::waitpid(pid_, nullptr, 0);
  }

  void send(const command& what) { write_all(to_, &what, sizeof what); }
  std::vector<double> receive() {
    std::uint64_t count = 0;
    if (!read_all(from_, &count, sizeof count) || count == kFailed) {
      throw std::runtime_error("a worker failed");
    }
    std::vector<double> values(count);
    if (!read_all(from_, values.data(), count * sizeof(double))) {
      throw std::runtime_error("a worker failed");
    }
    return values;
  }
  std::vector<double> call(const command& what) {
    send(what);
    return receive();
  }

 private:
  static constexpr std::uint64_t kFailed = ~std::uint64_t{0};

  static int serve(const std::function<handler()>& setup, int from, int to) {
    try {
      const handler handle = setup();
      for (command next{}; read_all(from, &next, sizeof next) && next.op != kQuit;) {
        const std::vector<double> values = handle(next);
        const std::uint64_t count = values.size();
        write_all(to, &count, sizeof count);
        write_all(to, values.data(), count * sizeof(double));
      }
      return 0;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "scaling_bench worker: %s\n", error.what());
      const std::uint64_t failed = kFailed;
      (void)!::write(to, &failed, sizeof failed);
      return 1;
    }
  }

  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
};

/// Sends @p what to each of @p workers and waits for all of them: they work at the same time.
void call_all(std::vector<std::unique_ptr<worker>>& workers, const std::vector<command>& what) {
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (what[i].count > 0) workers[i]->send(what[i]);
  }
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (what[i].count > 0) workers[i]->receive();
  }
}

// ---- figures ----------------------------------------------------------------------------------

/// One figure's curve over the sizes.
struct curve {
  curve(std::string figure_with_unit, std::string sizes_are)
      : figure(std::move(figure_with_unit)), size_name(std::move(sizes_are)) {}

  std::string figure;  ///< with its unit
  std::string size_name;
  std::vector<std::uint64_t> sizes;
  std::vector<summary> points;

  void add(std::uint64_t size, const std::vector<double>& samples) {
    sizes.push_back(size);
    points.push_back(summarise_blockwise(samples));
  }
  double p50_ratio() const { return points.back().median / points.front().median; }
  double p99_ratio() const { return points.back().p99 / points.front().p99; }
  bool flat() const { return p50_ratio() <= 1.2 && p99_ratio() <= 1.5; }
};

constexpr double kTargetP50 = 1.2;
constexpr double kTargetP99 = 1.5;

void print_curve(const curve& shown) {
  std::printf("\n%s\n  %-22s %10s %10s %10s %10s\n", shown.figure.c_str(), shown.size_name.c_str(),
              "p50", "p99", "p50 ratio", "p99 ratio");
  for (std::size_t i = 0; i < shown.points.size(); ++i) {
    std::printf("  %-22llu %10.2f %10.2f %10.2f %10.2f\n",
                static_cast<unsigned long long>(shown.sizes[i]), shown.points[i].median,
                shown.points[i].p99, shown.points[i].median / shown.points.front().median,
                shown.points[i].p99 / shown.points.front().p99);
  }
  std::fflush(stdout);
}

std::uint64_t daemon_rss_kib(pid_t daemon, const char* field) {
  std::ifstream status("/proc/" + std::to_string(daemon) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with(field))
      return std::strtoull(line.c_str() + std::strlen(field), nullptr, 10);
  }
  return 0;
}

/// The sizes 10^k from @p smallest up to @p largest.
std::vector<std::uint64_t> decades(std::uint64_t smallest, std::uint64_t largest) {
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t size = smallest; size <= largest; size *= 10) sizes.push_back(size);
  return sizes;
}

struct settings {
  std::string socket;
  pid_t daemon = -1;
  std::uint64_t max_allocations = 1'000'000;
  std::uint64_t max_locks = 10'000;
  std::uint64_t max_idle = 1000;
  std::uint64_t max_churn = 1000;
  std::uint64_t samples = 2000;
};

gpumem::Client connect(const settings& run, const char* label) {
  return gpumem::Client::connect({.socket_path = run.socket, .label = label});
}

// ---- allocations --------------------------------------------------------------------------------

/// Requests sent and not measured before a size's: at the first size as many as are measured
/// (the first thousands of requests of a fresh daemon and client are slower: warming up, the
/// smallest size would look slow and hide growth), at the others one batch.
std::uint64_t warm_up_samples(bool first_size, const settings& run, std::uint64_t batch) {
  return first_size ? run.samples : batch;
}

constexpr std::uint32_t kAllocate = 1;
constexpr std::uint32_t kRelease = 2;
constexpr std::uint32_t kOpenAndRelease = 3;
constexpr std::uint32_t kExitHolding = 4;
constexpr std::uint32_t kCountAllocations = 5;

/// What a client holds, and how it names its allocations.
worker::handler holder(const settings& run, std::uint64_t index) {
  auto client = std::make_shared<gpumem::Client>(connect(run, "holder"));
  auto held = std::make_shared<std::vector<gpumem::Buffer>>();
  return [client, held, index](const command& what) {
    // Gone as a crash goes: the daemon reclaims everything it held, at once, on its death.
    if (what.op == kExitHolding) ::_exit(0);
    for (std::uint64_t i = 0; i < what.count; ++i) {
      const std::string name = "h" + std::to_string(index) + "." + std::to_string(held->size());
      held->push_back(client->allocate(small_size(i), {.name = name}));
    }
    return std::vector<double>{};
  };
}

std::string measured_name(std::uint64_t round, std::uint64_t i) {
  return "m" + std::to_string(round) + "." + std::to_string(i);
}

/// The owner of the measured allocations: allocates a batch (named), later releases it (the
/// release that frees).
worker::handler allocation_owner(const settings& run) {
  auto client = std::make_shared<gpumem::Client>(connect(run, "owner"));
  auto batch = std::make_shared<std::vector<gpumem::Buffer>>();
  return [client, batch](const command& what) {
    std::vector<double> took;
    if (what.op == kCountAllocations) {
      return std::vector<double>{static_cast<double>(client->stats().allocations)};
    }
    if (what.op == kAllocate) {
      for (std::uint64_t i = 0; i < what.count; ++i) {
        const std::string name = measured_name(what.round, i);
        const auto start = clock_type::now();
        batch->push_back(client->allocate(small_size(i), {.name = name}));
        took.push_back(micros_since(start));
      }
    } else {
      for (gpumem::Buffer& each : *batch) {
        const auto start = clock_type::now();
        each.release();
        took.push_back(micros_since(start));
      }
      batch->clear();
    }
    return took;
  };
}

/// Another client that opens the owner's batch by name and lets go of it again.
worker::handler allocation_opener(const settings& run) {
  auto client = std::make_shared<gpumem::Client>(connect(run, "opener"));
  return [client](const command& what) {
    std::vector<gpumem::Buffer> opened;
    std::vector<double> took;
    for (std::uint64_t i = 0; i < what.count; ++i) {
      const std::string name = measured_name(what.round, i);
      const auto start = clock_type::now();
      opened.push_back(client->open(name));
      took.push_back(micros_since(start));
    }
    for (gpumem::Buffer& each : opened) each.release();
    return took;
  };
}

void allocation_curves(const settings& run, std::deque<curve>& out) {
  constexpr std::uint64_t kBatch = 50;
  curve& allocate = out.emplace_back("allocate, host, 64 B-4 KiB (us)", "live allocations");
  curve& open = out.emplace_back("open by name from another client (us)", "live allocations");
  curve& release = out.emplace_back("release by the owner, frees (us)", "live allocations");
  const auto sizes = decades(100, run.max_allocations);
  const std::uint64_t holder_count =
      (run.max_allocations + kAllocationsPerHolder - 1) / kAllocationsPerHolder;
  std::vector<std::unique_ptr<worker>> holders;
  for (std::uint64_t i = 0; i < holder_count; ++i) {
    holders.push_back(std::make_unique<worker>([&run, i] { return holder(run, i); }));
  }
  worker owner([&run] { return allocation_owner(run); });
  worker opener([&run] { return allocation_opener(run); });
  std::uint64_t filled = 0;
  std::uint64_t round = 0;
  std::printf("\nfilling host allocations (%llu holder processes):\n",
              static_cast<unsigned long long>(holder_count));
  for (const std::uint64_t live : sizes) {
    // The measured batch is live too while it is measured.
    const std::uint64_t target = live - kBatch;
    const auto fill_start = clock_type::now();
    std::vector<command> fills;
    for (std::uint64_t i = 0; i < holder_count; ++i) {
      const std::uint64_t share = target / holder_count + (i < target % holder_count ? 1 : 0);
      const std::uint64_t had = filled / holder_count + (i < filled % holder_count ? 1 : 0);
      fills.push_back({kAllocate, share - had, 0});
    }
    call_all(holders, fills);
    const double fill_seconds = micros_since(fill_start) / 1e6;
    filled = target;
    std::vector<double> allocated;
    std::vector<double> opened;
    std::vector<double> released;
    const std::uint64_t warm = warm_up_samples(live == sizes.front(), run, kBatch);
    for (std::uint64_t sample = 0; sample < warm + run.samples; sample += kBatch, ++round) {
      const bool warm_up = sample < warm;
      auto took = owner.call({kAllocate, kBatch, round});
      if (!warm_up) allocated.insert(allocated.end(), took.begin(), took.end());
      took = opener.call({kOpenAndRelease, kBatch, round});
      if (!warm_up) opened.insert(opened.end(), took.begin(), took.end());
      took = owner.call({kRelease, kBatch, round});
      if (!warm_up) released.insert(released.end(), took.begin(), took.end());
    }
    allocate.add(live, allocated);
    open.add(live, opened);
    release.add(live, released);
    std::printf("  %8llu live: filled in %.1f s, gpumemd RSS %llu MiB\n",
                static_cast<unsigned long long>(live), fill_seconds,
                static_cast<unsigned long long>(daemon_rss_kib(run.daemon, "VmRSS:") / 1024));
    std::fflush(stdout);
  }
  // The reclaim of a death: its time is the loop's, during which no other request is served.
  const auto reclaim_start = clock_type::now();
  for (auto& each : holders) each->send({kExitHolding, 1, 0});
  holders.clear();
  while (owner.call({kCountAllocations, 1, 0}).front() != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::printf("  holders exited holding %llu allocations; all reclaimed %.2f s later\n",
              static_cast<unsigned long long>(filled), micros_since(reclaim_start) / 1e6);
}

// ---- locks --------------------------------------------------------------------------------------

constexpr std::uint32_t kOpenLocks = 1;
constexpr std::uint32_t kCloseLocks = 2;

/// Keeps locks open so that they exist; closes the last ones opened when told (a lock closed
/// by everyone in a clean state goes away).
worker::handler lock_holder(const settings& run) {
  auto client = std::make_shared<gpumem::Client>(connect(run, "lock-holder"));
  auto held = std::make_shared<std::vector<gpumem::Lock>>();
  return [client, held](const command& what) {
    for (std::uint64_t i = 0; i < what.count; ++i) {
      if (what.op == kCloseLocks) {
        held->pop_back();
      } else {
        held->push_back(client->lock("l." + std::to_string(held->size())));
      }
    }
    return std::vector<double>{};
  };
}

/// Opens a batch of new locks (timed), locks and unlocks each (timed, per pair) and closes
/// them (timed): the figures come back as opens, then lock+unlock pairs, then closes.
worker::handler lock_user(const settings& run) {
  auto client = std::make_shared<gpumem::Client>(connect(run, "lock-user"));
  return [client](const command& what) {
    constexpr int kPairs = 64;
    std::vector<gpumem::Lock> opened;
    std::vector<double> opens;
    std::vector<double> pairs;
    std::vector<double> closes;
    for (std::uint64_t i = 0; i < what.count; ++i) {
      const std::string name = measured_name(what.round, i);
      const auto start = clock_type::now();
      opened.push_back(client->lock(name));
      opens.push_back(micros_since(start));
    }
    for (gpumem::Lock& each : opened) {
      each.lock();  // the first use sets its domain
      each.unlock();
      const auto start = clock_type::now();
      for (int pair = 0; pair < kPairs; ++pair) {
        each.lock();
        each.unlock();
      }
      pairs.push_back(micros_since(start) * 1000.0 / kPairs);
    }
    for (gpumem::Lock& each : opened) {
      const auto start = clock_type::now();
      each = gpumem::Lock();
      closes.push_back(micros_since(start));
    }
    opens.insert(opens.end(), pairs.begin(), pairs.end());
    opens.insert(opens.end(), closes.begin(), closes.end());
    return opens;
  };
}

/// One size's samples of the three lock figures.
struct lock_samples {
  std::vector<double> opens;
  std::vector<double> pairs;
  std::vector<double> closes;
};

void lock_curves(const settings& run, std::deque<curve>& out) {
  curve& open = out.emplace_back("open a new lock by name (us)", "locks existing");
  curve& pair = out.emplace_back("uncontended lock()+unlock() (ns)", "locks existing");
  curve& close = out.emplace_back("close a lock (us)", "locks existing");
  worker holder([&run] { return lock_holder(run); });
  worker user([&run] { return lock_user(run); });
  // The same batch at every size (half the smallest): a round's start costs the first requests
  // after a pause something, and that must weigh the same in every point.
  constexpr std::uint64_t batch = 5;
  constexpr auto batch_length = static_cast<std::ptrdiff_t>(batch);
  std::uint64_t round = 0;
  // Batches of the user's, their figures kept in @p kept (none: a warm-up).
  const auto take = [&](std::uint64_t samples, lock_samples* kept) {
    for (std::uint64_t sample = 0; sample < samples; sample += batch, ++round) {
      const auto took = user.call({kOpenLocks, batch, round});
      if (kept == nullptr) continue;
      const auto pairs_begin = took.begin() + batch_length;
      const auto closes_begin = pairs_begin + batch_length;
      kept->opens.insert(kept->opens.end(), took.begin(), pairs_begin);
      kept->pairs.insert(kept->pairs.end(), pairs_begin, closes_begin);
      kept->closes.insert(kept->closes.end(), closes_begin, took.end());
    }
  };
  take(warm_up_samples(true, run, batch), nullptr);
  // Each size is visited on the way up and on the way down, twice, as the idle clients' sizes
  // are, and takes a quarter of its samples each time: in one pass up, one run on the
  // development VM read the lock pair at 15.9 ns for 10 and 100 locks and 20.0-20.3 ns for
  // 1,000 and 10,000, and the next two runs 19.5-20.3 ns at every size.
  constexpr int kPasses = 4;
  const auto sizes = decades(10, run.max_locks);
  const std::uint64_t per_visit = (run.samples / kPasses + batch - 1) / batch * batch;
  std::vector<lock_samples> samples(sizes.size());
  std::uint64_t existing = 0;
  for (int pass = 0; pass < kPasses; ++pass) {
    for (std::size_t step = 0; step < sizes.size(); ++step) {
      const std::size_t size = pass % 2 == 0 ? step : sizes.size() - 1 - step;
      const std::uint64_t wanted = sizes[size] - batch;  // the user's batch makes up the rest
      if (wanted > existing) holder.call({kOpenLocks, wanted - existing, 0});
      if (wanted < existing) holder.call({kCloseLocks, existing - wanted, 0});
      existing = wanted;
      take(batch, nullptr);
      take(per_visit, &samples[size]);
    }
  }
  for (std::size_t size = 0; size < sizes.size(); ++size) {
    open.add(sizes[size], samples[size].opens);
    pair.add(sizes[size], samples[size].pairs);
    close.add(sizes[size], samples[size].closes);
  }
}

// ---- idle clients -------------------------------------------------------------------------------

constexpr std::uint32_t kConnect = 1;
constexpr std::uint32_t kDisconnect = 2;
constexpr std::uint32_t kBusy = 1;
constexpr std::uint32_t kWaitForClients = 2;

/// Keeps connections open, each holding one allocation, that send nothing more; closes the
/// last ones made when told.
worker::handler idle_connections(const settings& run) {
  auto idle = std::make_shared<std::vector<std::pair<gpumem::Client, gpumem::Buffer>>>();
  return [&run, idle](const command& what) {
    for (std::uint64_t i = 0; i < what.count; ++i) {
      if (what.op == kDisconnect) {
        idle->pop_back();
        continue;
      }
      auto client = connect(run, "idle");
      auto buffer = client.allocate(4096);
      idle->emplace_back(std::move(client), std::move(buffer));
    }
    return std::vector<double>{};
  };
}

/// Pings, then allocates and releases, as fast as it can: pings first, then allocate+release.
/// Or waits until the daemon has no more than `count` clients (its hang-ups are handled).
worker::handler busy_client(const settings& run) {
  auto client = std::make_shared<gpumem::Client>(connect(run, "busy"));
  return [client](const command& what) {
    std::vector<double> took;
    if (what.op == kWaitForClients) {
      const auto give_up = clock_type::now() + std::chrono::seconds(30);
      while (client->stats().clients > what.count) {
        if (clock_type::now() > give_up) throw std::runtime_error("idle clients did not go");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return took;
    }
    for (std::uint64_t i = 0; i < what.count; ++i) {
      const auto start = clock_type::now();
      client->ping();
      took.push_back(micros_since(start));
    }
    for (std::uint64_t i = 0; i < what.count; ++i) {
      const auto start = clock_type::now();
      client->allocate(4096).release();
      took.push_back(micros_since(start));
    }
    return took;
  };
}

/// Processes holding idle connections, kConnectionsPerIdleProcess each but the last.
class idle_crowd {
 public:
  explicit idle_crowd(const settings& run) : run_(run) {}

  /// Connects or closes idle connections until @p wanted are open.
  void resize(std::uint64_t wanted) {
    while (connected_ < wanted) {
      if (keepers_.empty() || held_.back() == kConnectionsPerIdleProcess) {
        keepers_.push_back(std::make_unique<worker>([this] { return idle_connections(run_); }));
        held_.push_back(0);
      }
      const std::uint64_t more =
          std::min(wanted - connected_, kConnectionsPerIdleProcess - held_.back());
      keepers_.back()->call({kConnect, more, 0});
      held_.back() += more;
      connected_ += more;
    }
    while (connected_ > wanted) {
      const std::uint64_t fewer = std::min(connected_ - wanted, held_.back());
      keepers_.back()->call({kDisconnect, fewer, 0});
      held_.back() -= fewer;
      connected_ -= fewer;
      if (held_.back() == 0) {
        keepers_.pop_back();
        held_.pop_back();
      }
    }
  }

 private:
  const settings& run_;
  std::vector<std::unique_ptr<worker>> keepers_;
  std::vector<std::uint64_t> held_;  ///< connections of each keeper
  std::uint64_t connected_ = 0;
};

void idle_curves(const settings& run, std::deque<curve>& out) {
  curve& ping = out.emplace_back("busy client's ping (us)", "idle clients");
  curve& allocate = out.emplace_back("busy client's allocate+release 4 KiB (us)", "idle clients");
  worker busy([&run] { return busy_client(run); });
  busy.call({kBusy, run.samples, 0});  // warm-up, as warm_up_samples() says
  idle_crowd crowd(run);
  // Each size is visited on the way up and on the way down, twice: a slow stretch of the
  // machine (a size's samples take a tenth of a second) then weighs on every size alike, where
  // one pass up read 51-71 us for the same size in three runs.
  constexpr int kPasses = 4;
  const auto sizes = decades(1, run.max_idle);
  std::vector<std::vector<double>> pings(sizes.size());
  std::vector<std::vector<double>> allocations(sizes.size());
  for (int pass = 0; pass < kPasses; ++pass) {
    for (std::size_t step = 0; step < sizes.size(); ++step) {
      const std::size_t size = pass % 2 == 0 ? step : sizes.size() - 1 - step;
      crowd.resize(sizes[size]);
      busy.call({kWaitForClients, sizes[size] + 1, 0});
      const auto took = busy.call({kBusy, run.samples, 0});
      const auto half = took.begin() + static_cast<std::ptrdiff_t>(run.samples);
      pings[size].insert(pings[size].end(), took.begin(), half);
      allocations[size].insert(allocations[size].end(), half, took.end());
    }
  }
  for (std::size_t size = 0; size < sizes.size(); ++size) {
    ping.add(sizes[size], pings[size]);
    allocate.add(sizes[size], allocations[size]);
  }
}

// ---- churn
// ----------------------------------------------------------------------------------------

constexpr std::uint32_t kStats = 1;

/// Reports the daemon's allocation and client counts.
worker::handler observer(const settings& run) {
  auto client = std::make_shared<gpumem::Client>(connect(run, "observer"));
  return [client](const command&) {
    const gpumem::Stats now = client->stats();
    return std::vector<double>{static_cast<double>(now.allocations),
                               static_cast<double>(now.clients)};
  };
}

/// Forks @p count clients that connect, allocate (one anonymous and one named buffer) and exit,
/// by their destructors or killed; returns the seconds until the daemon holds nothing of theirs.
double churn(const settings& run, worker& watcher, std::uint64_t count, bool killed,
             std::uint64_t wave) {
  const auto before = watcher.call({kStats, 1, 0});
  const auto start = clock_type::now();
  std::vector<pid_t> children;
  for (std::uint64_t i = 0; i < count; ++i) {
    const pid_t child = ::fork();
    if (child == 0) {
      close_parent_fds();
      try {
        auto client = connect(run, "churn");
        auto anonymous = client.allocate(4096);
        const std::string name = "c" + std::to_string(wave) + "." + std::to_string(i);
        auto named = client.allocate(64, {.name = name});
        if (killed) ::raise(SIGKILL);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "churn client: %s\n", error.what());
        ::_exit(1);
      }
      ::_exit(0);
    }
    children.push_back(child);
  }
  const bool as_expected = gpumem::bench::wait_for_all(children, [killed](int status) {
    return killed ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                  : gpumem::bench::exited_cleanly(status);
  });
  if (!as_expected) throw std::runtime_error("a churn client failed");
  for (;;) {
    const auto now = watcher.call({kStats, 1, 0});
    if (now == before) break;
    if (micros_since(start) > 60e6) {
      throw std::runtime_error("the daemon still holds allocations or clients of exited clients");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return micros_since(start) / 1e6;
}

void churn_curves(const settings& run, std::deque<curve>& out) {
  curve& exited = out.emplace_back(
      "connect, allocate, exit (destructors), until reclaimed, per client (us)", "clients");
  curve& killed =
      out.emplace_back("connect, allocate, SIGKILL, until reclaimed, per client (us)", "clients");
  worker watcher([&run] { return observer(run); });
  std::uint64_t wave = 0;
  constexpr int kRepeats = 5;
  const auto counts = decades(10, run.max_churn);
  // per_client[size][kill]: the sizes take turns, so that a slow stretch of the machine (the
  // 2-core VM's per-client time moved by 30% from run to run) weighs on each size alike.
  std::vector<std::array<std::vector<double>, 2>> per_client(counts.size());
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    for (std::size_t size = 0; size < counts.size(); ++size) {
      for (const bool kill : {false, true}) {
        per_client[size][kill].push_back(churn(run, watcher, counts[size], kill, wave++) * 1e6 /
                                         static_cast<double>(counts[size]));
      }
    }
  }
  for (std::size_t size = 0; size < counts.size(); ++size) {
    exited.add(counts[size], per_client[size][false]);
    killed.add(counts[size], per_client[size][true]);
  }
  std::printf(
      "\n(after every wave gpumemd's stats showed the allocations and clients of before it)\n");
}

void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpumemd scaling curves: request costs as the node fills up"};
  std::string daemon = GPUMEM_BENCH_DAEMON;
  settings run;
  bool quick = false;
  bool no_pin = false;
  std::vector<std::string> parts{"allocations", "locks", "idle", "churn"};
  app.add_option("--daemon", daemon, "gpumemd binary")->check(CLI::ExistingFile);
  app.add_flag("--quick", quick, "up to 10^5 allocations, 10^3 locks, 100 idle and churn clients");
  app.add_option("--max-allocations", run.max_allocations, "largest count of live allocations")
      ->check(CLI::Range(1000, 10'000'000));
  app.add_option("--max-locks", run.max_locks, "largest count of locks")
      ->check(CLI::Range(100, 1'000'000));
  app.add_option("--max-idle", run.max_idle, "largest count of idle clients")
      ->check(CLI::Range(10, 100'000));
  app.add_option("--max-churn", run.max_churn, "largest count of exiting clients")
      ->check(CLI::Range(100, 100'000));
  app.add_option("--samples", run.samples, "requests measured per size")
      ->check(CLI::Range(100, 1'000'000));
  app.add_flag("--no-pin", no_pin, "leave the daemon's and the clients' CPUs to the scheduler");
  app.add_option("--parts", parts, "which curves: allocations, locks, idle, churn")
      ->delimiter(',')
      ->check(CLI::IsMember({"allocations", "locks", "idle", "churn"}));
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    run.max_allocations = std::min<std::uint64_t>(run.max_allocations, 100'000);
    run.max_locks = std::min<std::uint64_t>(run.max_locks, 1000);
    run.max_idle = std::min<std::uint64_t>(run.max_idle, 100);
    run.max_churn = std::min<std::uint64_t>(run.max_churn, 100);
    run.samples = std::min<std::uint64_t>(run.samples, 500);
  }
  raise_descriptor_limit();
  // A worker that died must show as a failed write, not end the benchmark.
  ::signal(SIGPIPE, SIG_IGN);
  ::setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  // Room for every allocation at a page each; no quota stands in the way of the curves.
  const std::uint64_t pool_bytes = std::max<std::uint64_t>(run.max_allocations, 100'000) * 8192;
  const std::string config =
      "pools:\n  - name: host\n    device: host\n    size: " + std::to_string(pool_bytes) +
      "\nquotas:\n  default: {}\nmax_connections: " +
      std::to_string(run.max_idle + run.max_churn + 64) + "\n";
  const bench_daemon gpumemd(daemon, "gpumem-scaling-bench", "warn", config);
  run.socket = gpumemd.socket();
  run.daemon = gpumemd.pid();
  std::optional<cpu_placement> placement;
  if (!no_pin)
    placement.emplace(std::initializer_list<pid_t>{run.daemon}, cpu_placement::sides::apart);
  std::printf("placement: %s\n",
              placement ? placement->report().c_str() : "left to the scheduler (--no-pin)");
  const auto start = clock_type::now();
  std::deque<curve> curves;
  int status = 0;
  const std::pair<const char*, void (*)(const settings&, std::deque<curve>&)> kParts[] = {
      {"allocations", allocation_curves},
      {"locks", lock_curves},
      {"idle", idle_curves},
      {"churn", churn_curves}};
  for (const auto& [name, part] : kParts) {
    if (std::find(parts.begin(), parts.end(), name) == parts.end()) continue;
    const std::size_t first = curves.size();
    try {
      part(run, curves);
    } catch (const std::exception& error) {
      // The sizes measured so far are printed: where a curve stops is a finding too.
      std::printf("\n%s: stopped at the next size: %s\n", name, error.what());
      status = 1;
    }
    for (std::size_t i = first; i < curves.size(); ++i) print_curve(curves[i]);
  }
  std::erase_if(curves, [](const curve& each) { return each.points.empty(); });
  std::printf(
      "\nlargest size measured against the smallest (target: p50 <= %.1fx, p99 <= %.1fx):\n",
      kTargetP50, kTargetP99);
  for (const curve& each : curves) {
    std::printf("  %-74s %8llu: p50 %5.2fx  p99 %5.2fx  %s\n", each.figure.c_str(),
                static_cast<unsigned long long>(each.sizes.back()), each.p50_ratio(),
                each.p99_ratio(), each.flat() ? "flat" : "NOT FLAT");
  }
  std::printf("gpumemd peak RSS %llu MiB; whole run %.0f s\n",
              static_cast<unsigned long long>(daemon_rss_kib(run.daemon, "VmHWM:") / 1024),
              micros_since(start) / 1e6);
  return status;
}
