// Locks, barriers and channels against the raw mechanisms they are built on, measured in the
// same run: a compare-and-swap lock, a futex ping-pong, a process-shared pthread_barrier_t,
// and on a GPU the stream memory operation ping-pong, the SM spin ping-pong and a device copy.
// Every party is a forked process with its own connection; the parent never touches CUDA.
//
//   sync_bench [--daemon PATH] [--rounds N]
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_daemon.hpp"
#include "gpumem/gpumem.hpp"
#include "percentiles.hpp"
#ifdef GPUMEM_BENCH_CUDA
#include "gpumem/shared/cuda/driver.hpp"
#include "sync_kernels.hpp"
#endif

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

double nanos_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
}

/// Memory every forked party sees: the parent maps it before forking.
struct scratch {
  std::uint32_t cas_word;
  std::uint32_t futex_word;
  std::uint32_t ready;
  std::uint32_t turn;
  pthread_barrier_t barrier;
  pthread_mutex_t mutex;  ///< process-shared and robust, as a lock between processes must be
  double paired[3];       ///< a channel timed against the copies alone: see paired_rates
};

scratch* shared_scratch() {
  void* memory = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) throw std::runtime_error("mmap");
  return new (memory) scratch{};
}

std::atomic_ref<std::uint32_t> word(std::uint32_t& w) {
  return std::atomic_ref<std::uint32_t>(w);
}

/// A party's result when it failed, or was stopped because another did. Every figure is a
/// time, a rate or a flag, none negative.
constexpr double kFailed = -1;

/// Runs @p work(party) in @p parties forked processes at once; their results, by party. Once a
/// party fails (throws or dies), or one cannot be started, the others still running are killed:
/// they may be waiting for it (at the start, for a turn, on a channel) and would wait for ever.
/// Their results are kFailed too.
std::vector<double> in_parties(int parties, const std::function<double(int)>& work) {
  std::vector<pollfd> pipes;  // by party started; fd -1 once its result is in
  std::vector<pid_t> children;
  const auto stop_the_rest = [&] {
    for (std::size_t i = 0; i < pipes.size(); ++i) {
      if (pipes[i].fd >= 0) ::kill(children[i], SIGKILL);
    }
  };
  bool stopping = false;
  for (int party = 0; party < parties && !stopping; ++party) {
    int fds[2];
    if (::pipe(fds) != 0) {
      std::perror("sync_bench: pipe for a party");
      stopping = true;
      break;
    }
    const pid_t child = ::fork();
    if (child == 0) {
      ::close(fds[0]);
      double result = kFailed;
      int status = 0;
      try {
        result = work(party);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "party %d: %s\n", party, error.what());
        status = 1;
      }
      (void)!::write(fds[1], &result, sizeof result);
      ::_exit(status);
    }
    ::close(fds[1]);
    if (child < 0) {
      std::perror("sync_bench: fork of a party");
      ::close(fds[0]);
      stopping = true;
      break;
    }
    pipes.push_back({fds[0], POLLIN, 0});
    children.push_back(child);
  }
  if (stopping) stop_the_rest();
  std::vector<double> results(static_cast<std::size_t>(parties), kFailed);
  for (std::size_t left = pipes.size(); left > 0;) {
    if (::poll(pipes.data(), pipes.size(), -1) < 0) {
      if (errno == EINTR) continue;
      std::perror("sync_bench: poll on the parties");
      stop_the_rest();  // their pipes then end: every result below is kFailed
      stopping = true;
    }
    for (std::size_t i = 0; i < pipes.size(); ++i) {
      if (pipes[i].fd < 0 || (pipes[i].revents == 0 && !stopping)) continue;
      double value = kFailed;
      if (::read(pipes[i].fd, &value, sizeof value) != sizeof value) value = kFailed;
      ::close(pipes[i].fd);
      pipes[i].fd = -1;  // poll skips it from now on
      --left;
      results[i] = value;
      if (value < 0 && !stopping) {
        stopping = true;
        std::fprintf(stderr, "party %zu failed: the other parties are stopped\n", i);
        stop_the_rest();
      }
    }
  }
  for (const pid_t child : children) ::waitpid(child, nullptr, 0);
  return results;
}

bool any_failed(const std::vector<double>& results) {
  return std::any_of(results.begin(), results.end(), [](double result) { return result < 0; });
}

/// The median of @p values, or kFailed when a party failed in any of them.
double median_unless_failed(const std::vector<double>& values) {
  return any_failed(values) ? kFailed : gpumem::bench::summarise(values).median;
}

/// The largest of the parties' @p results (the slower party's time, or the one party's rate
/// where the other returns 0), or kFailed when a party failed.
double largest_unless_failed(const std::vector<double>& results) {
  return any_failed(results) ? kFailed : *std::max_element(results.begin(), results.end());
}

/// Every party spins here until all @p parties arrived (host, cheap, before timing starts).
void start_together(scratch& s, std::uint32_t parties) {
  word(s.ready).fetch_add(1);
  while (word(s.ready).load() < parties) std::this_thread::yield();
}

/// Every party's round times, in memory the parent maps before forking.
class round_samples {
 public:
  round_samples(int parties, int rounds)
      : rounds_(static_cast<std::size_t>(rounds)),
        count_(static_cast<std::size_t>(parties) * rounds_) {
    void* memory = ::mmap(nullptr, count_ * sizeof(double), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::runtime_error("mmap");
    values_ = static_cast<double*>(memory);
  }
  ~round_samples() { ::munmap(values_, count_ * sizeof(double)); }
  round_samples(const round_samples&) = delete;
  round_samples& operator=(const round_samples&) = delete;

  double& at(int party, int round) {
    return values_[static_cast<std::size_t>(party) * rounds_ + static_cast<std::size_t>(round)];
  }
  gpumem::bench::summary percentiles() const {
    return gpumem::bench::summarise({values_, values_ + count_});
  }

 private:
  std::size_t rounds_;
  std::size_t count_;
  double* values_ = nullptr;
};

void futex_wait(std::uint32_t* address, std::uint32_t expected) {
  ::syscall(SYS_futex, address, FUTEX_WAIT, expected, nullptr, nullptr, 0);
}
void futex_wake(std::uint32_t* address) {
  ::syscall(SYS_futex, address, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void print_ratio(const char* what, double ours, double raw, const char* unit, const char* target) {
  if (ours < 0 || raw < 0) {
    std::printf("%-44s failed: a party failed (see above)\n", what);
    std::fflush(stdout);
    return;
  }
  std::printf("%-44s gpumem %9.3f %s   raw %9.3f %s   ratio %.2f  (%s)\n", what, ours, unit, raw,
              unit, ours / raw, target);
  std::fflush(stdout);
}

#ifdef GPUMEM_BENCH_CUDA
/// s.turn once the consumer of a paired figure is done with the channel: past every segment's.
constexpr std::uint32_t kConsumerDone = gpumem::bench::kSegments + 2;

/// A channel's consumer rate timed against the same copies without the channel, in the same
/// two processes, segment by segment. Measured apart, in two pairs of processes, the copies
/// alone moved from run to run as much as the ratio: 678-751 GB/s in kernels under MPS, 193-338
/// GB/s on a stream, where batches of 8 then read 0.57-1.24 of them.
struct paired_rates {
  double channel = 0;  ///< the median of the segments' channel rates
  double alone = 0;    ///< the median of the segments' rates of the copies alone
  double ratio = 0;    ///< the median of the segments' ratios, the figure
};

/// The consumer's half of a paired figure. Each segment times @p through_channel and @p alone
/// one after the other (alone first every other segment, so neither always follows the other)
/// and tells the producer to start its part of the segment (s.turn = segment + 1) just before
/// the channel's: none of the producer's work runs beside the copies alone. The result goes to
/// s.paired for the parent. False when the channel broke meanwhile: a dead producer's count
/// jumps ahead, and the consumer's waits then pass at once, timing bare copies.
template <typename Through, typename Alone>
bool time_against_the_copies_alone(scratch& s, const gpumem::Channel& pipe,
                                   Through&& through_channel, Alone&& alone) {
  std::vector<double> channel_rates, alone_rates;
  s.paired[2] = gpumem::bench::median_of_segments([&](int segment) {
    double without = 0;
    if (segment % 2 == 1) without = alone();
    word(s.turn).store(static_cast<std::uint32_t>(segment) + 1);
    const double through = through_channel();
    if (segment % 2 == 0) without = alone();
    if (segment > 0) {  // segment 0 is untimed
      channel_rates.push_back(through);
      alone_rates.push_back(without);
    }
    return through / without;
  });
  s.paired[0] = gpumem::bench::summarise(channel_rates).median;
  s.paired[1] = gpumem::bench::summarise(alone_rates).median;
  const bool intact = !pipe.broken();
  word(s.turn).store(kConsumerDone);
  return intact;
}

/// The producer's half: @p hand_on (one segment's items, its stream synchronised) once the
/// consumer starts each segment, then its place held until the consumer has looked at the
/// channel (a party that leaves breaks it). A consumer that failed has exited and the daemon
/// broke the channel, which ends the waits: false then.
template <typename HandOn>
bool hand_on_segment_by_segment(scratch& s, const gpumem::Channel& pipe, HandOn&& hand_on) {
  const auto wait_for_turn = [&](std::uint32_t turn) {
    while (word(s.turn).load() != turn) {
      if (pipe.broken()) return false;
    }
    return true;
  };
  for (std::uint32_t segment = 0; segment <= gpumem::bench::kSegments; ++segment) {
    if (!wait_for_turn(segment + 1)) return false;
    hand_on();
  }
  return wait_for_turn(kConsumerDone);
}

/// What time_against_the_copies_alone wrote, when no party of the figure returned a negative
/// result. A party that failed, or a channel broken meanwhile (a dead producer's count jumps
/// ahead, and the consumer's waits then pass at once: bare copies), leaves no figure.
std::optional<paired_rates> paired_result(const scratch& s, const std::vector<double>& parties) {
  if (any_failed(parties)) return std::nullopt;
  return paired_rates{s.paired[0], s.paired[1], s.paired[2]};
}

void print_paired(const char* what, const std::optional<paired_rates>& rates, const char* target) {
  if (!rates) {
    std::printf("%-44s failed: a party failed or the channel broke (see above)\n", what);
  } else {
    std::printf("%-44s gpumem %9.3f GB/s   raw %9.3f GB/s   ratio %.2f  (%s)\n", what,
                rates->channel, rates->alone, rates->ratio, target);
  }
  std::fflush(stdout);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpumemd lock, barrier and channel benchmark"};
  std::string daemon = GPUMEM_BENCH_DAEMON;
  int rounds = 20000;
  int barrier_runs = 10;
  app.add_option("--daemon", daemon, "gpumemd binary")->check(CLI::ExistingFile);
  app.add_option("--rounds", rounds, "hand-offs per figure, in segments after an untimed one")
      ->check(CLI::PositiveNumber);
  app.add_option("--barrier-runs", barrier_runs, "times the barrier figure is measured")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const bench_daemon gpumemd(daemon, "gpumem-sync-bench");
  const gpumem::ConnectOptions connect{.socket_path = gpumemd.socket(), .label = "bench"};
  scratch& s = *shared_scratch();
  const auto reset_scratch = [&] {
    s.cas_word = s.futex_word = s.ready = s.turn = 0;
    std::fill(std::begin(s.paired), std::end(s.paired), 0.0);
  };

  // Uncontended lock + unlock, one process, against a CAS lock, two bare compare-and-swaps and a
  // robust process-shared pthread_mutex_t, the peer a program would otherwise use between
  // processes. The CAS lock cannot put a waiter to sleep, so it releases with a plain store; a
  // lock whose waiters sleep must learn at release whether one is queued, which takes a second
  // locked instruction (the mutex's too). Each figure is the median of kSegments processes, the
  // four alternating: on the development VM one process's lock+unlock took 7 ns and the next
  // one's 12, for as long as each lived.
  pthread_mutexattr_t mutex_attribute;
  pthread_mutexattr_init(&mutex_attribute);
  pthread_mutexattr_setpshared(&mutex_attribute, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&mutex_attribute, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&s.mutex, &mutex_attribute);
  constexpr int kRepeats = 400'000;
  const auto nanos_per_pair = [](auto&& lock_and_unlock) {
    lock_and_unlock();  // the first use maps the lock's pages
    auto start = clock_type::now();
    for (int i = 0; i < kRepeats; ++i) lock_and_unlock();
    return nanos_since(start) / kRepeats;
  };
  std::vector<double> lock_ns, cas_ns, two_cas_ns, mutex_ns;
  for (int segment = 0; segment < gpumem::bench::kSegments; ++segment) {
    lock_ns.push_back(in_parties(1, [&](int) {
      auto client = gpumem::Client::connect(connect);
      auto lock = client.lock("bench.solo");
      return nanos_per_pair([&] {
        lock.lock();
        lock.unlock();
      });
    })[0]);
    cas_ns.push_back(in_parties(1, [&](int) {
      auto cas = word(s.cas_word);
      return nanos_per_pair([&] {
        std::uint32_t expected = 0;
        while (!cas.compare_exchange_weak(expected, 1, std::memory_order_acquire)) expected = 0;
        cas.store(0, std::memory_order_release);
      });
    })[0]);
    // The floor of a lock that must learn at release whether a waiter is queued: a
    // compare-and-swap to take it and one to release it, nothing else.
    two_cas_ns.push_back(in_parties(1, [&](int) {
      auto cas = word(s.cas_word);
      return nanos_per_pair([&] {
        std::uint32_t expected = 0;
        while (!cas.compare_exchange_weak(expected, 1, std::memory_order_acquire)) expected = 0;
        expected = 1;
        cas.compare_exchange_strong(expected, 0, std::memory_order_release);
      });
    })[0]);
    mutex_ns.push_back(in_parties(1, [&](int) {
      return nanos_per_pair([&] {
        pthread_mutex_lock(&s.mutex);
        pthread_mutex_unlock(&s.mutex);
      });
    })[0]);
  }
  const double solo = median_unless_failed(lock_ns);
  print_ratio("uncontended lock+unlock (ns)", solo, median_unless_failed(cas_ns), "ns",
              "target <= 2, CAS lock");
  print_ratio("uncontended lock+unlock (ns)", solo, median_unless_failed(two_cas_ns), "ns",
              "two compare-and-swaps, the floor of a lock whose waiters sleep");
  print_ratio("uncontended lock+unlock (ns)", solo, median_unless_failed(mutex_ns), "ns",
              "robust process-shared pthread_mutex_t, no target");

  // Contended: two processes take turns through the lock (a turn word it protects), against
  // the same turns through a futex word.
  reset_scratch();
  const auto handoff = in_parties(2, [&](int party) {
    auto client = gpumem::Client::connect(connect);
    auto lock = client.lock("bench.contended");
    const auto me = static_cast<std::uint32_t>(party);
    start_together(s, 2);
    auto start = clock_type::now();
    for (int i = 0; i < rounds; ++i) {
      lock.lock();
      while (s.turn % 2 != me) {  // FIFO: unlocking hands it to the other, queued behind us
        lock.unlock();
        lock.lock();
      }
      ++s.turn;
      lock.unlock();
    }
    return nanos_since(start) / 1000.0 / (2.0 * rounds);
  });
  reset_scratch();
  const auto raw_handoff = in_parties(2, [&](int party) {
    const auto me = static_cast<std::uint32_t>(party);
    start_together(s, 2);
    auto start = clock_type::now();
    for (int i = 0; i < rounds; ++i) {
      std::uint32_t seen;
      while ((seen = word(s.futex_word).load()) % 2 != me) futex_wait(&s.futex_word, seen);
      word(s.futex_word).store(seen + 1);
      futex_wake(&s.futex_word);
    }
    return nanos_since(start) / 1000.0 / (2.0 * rounds);
  });
  print_ratio("contended hand-off, 2 processes (us)", largest_unless_failed(handoff),
              largest_unless_failed(raw_handoff), "us", "target <= 1, futex ping-pong");

  // Barrier of 8 processes: median and p99 round, over several runs, each against
  // pthread_barrier_t in the same run (a single run hid that rounds were bimodal across runs).
  constexpr int kParties = 8;
  const int barrier_rounds = std::max(200, rounds / 10);
  round_samples samples(kParties, barrier_rounds);
  pthread_barrierattr_t shared_attribute;
  pthread_barrierattr_init(&shared_attribute);
  pthread_barrierattr_setpshared(&shared_attribute, PTHREAD_PROCESS_SHARED);
  int barrier_runs_met = 0;
  int barrier_runs_failed = 0;
  double best_ratio = 1e9, worst_ratio = 0, worst_p99 = 0;
  for (int run = 1; run <= barrier_runs; ++run) {
    reset_scratch();
    const auto parties = in_parties(kParties, [&](int party) {
      auto client = gpumem::Client::connect(connect);
      auto barrier = client.barrier("bench.barrier." + std::to_string(run), kParties);
      start_together(s, kParties);
      for (int i = 0; i < barrier_rounds; ++i) {
        auto start = clock_type::now();
        if (barrier.arrive_and_wait() != gpumem::BarrierStatus::ok)
          throw std::runtime_error("broken");
        samples.at(party, i) = nanos_since(start) / 1000.0;
      }
      return 0.0;
    });
    const std::string what = "barrier of 8 processes, run " + std::to_string(run) + " (us)";
    if (any_failed(parties)) {
      print_ratio(what.c_str(), kFailed, kFailed, "us", "");
      ++barrier_runs_failed;
      continue;
    }
    const auto ours = samples.percentiles();
    pthread_barrier_init(&s.barrier, &shared_attribute, kParties);
    reset_scratch();
    const auto raw_parties = in_parties(kParties, [&](int party) {
      start_together(s, kParties);
      for (int i = 0; i < barrier_rounds; ++i) {
        auto start = clock_type::now();
        pthread_barrier_wait(&s.barrier);
        samples.at(party, i) = nanos_since(start) / 1000.0;
      }
      return 0.0;
    });
    if (any_failed(raw_parties)) {
      // Not destroyed: a barrier whose waiters were killed would make its destroy wait for them.
      // The next run initialises it again.
      print_ratio(what.c_str(), kFailed, kFailed, "us", "");
      ++barrier_runs_failed;
      continue;
    }
    pthread_barrier_destroy(&s.barrier);
    const auto raw = samples.percentiles();
    print_ratio(what.c_str(), ours.median, raw.median, "us", "target <= 0.5, pthread_barrier_t");
    std::printf("%-44s gpumem p99 %9.3f us   raw p99 %9.3f us\n", "", ours.p99, raw.p99);
    barrier_runs_met += ours.median <= 0.5 * raw.median;
    best_ratio = std::min(best_ratio, ours.median / raw.median);
    worst_ratio = std::max(worst_ratio, ours.median / raw.median);
    worst_p99 = std::max(worst_p99, ours.p99);
  }
  if (barrier_runs_failed == barrier_runs) {
    std::printf("barrier of 8: failed in every run (see above)\n");
  } else {
    std::printf(
        "barrier of 8: %d of %d runs at or below 0.5x pthread_barrier_t (ratios %.2f-%.2f, "
        "largest p99 %.1f us; %d run(s) failed)\n",
        barrier_runs_met, barrier_runs, best_ratio, worst_ratio, worst_p99, barrier_runs_failed);
  }
  std::fflush(stdout);

#ifdef GPUMEM_BENCH_CUDA
  using namespace gpumem::testing;
  const double gpu = in_parties(1, [&](int) { return why_no_gpu().empty() ? 1.0 : 0.0; })[0];
  if (gpu < 0) {
    std::printf("GPU figures skipped: the process looking for a CUDA device failed (see above)\n");
  } else if (gpu == 0) {
    std::printf("GPU figures skipped: no usable CUDA device\n");
  } else {
    const double mps_seen = in_parties(
        1, [&](int) { return gpumem::Client::connect(connect).stats().mps ? 1.0 : 0.0; })[0];
    const bool mps = mps_seen == 1.0;
    std::printf("MPS %s\n", mps_seen < 0 ? "unknown: asking gpumemd failed (see above); taken as "
                                           "not active"
                            : mps        ? "active"
                                         : "not active");

    // Stream-ordered lock: the processes take tickets in turn (a host spin on a shared word),
    // so every acquisition waits for the other process's release on the GPU. The turn passes
    // once lock(stream) has taken the ticket: that is all the alternation needs, and the other
    // process's lock then overlaps this one's unlock on the host, as in two processes that each
    // queue critical sections. Passed after unlock(stream) instead, each turn waits for one
    // whole lock + unlock on the host; that shape is printed too, against the raw peers that
    // take the same host turns. Each figure is the median of its segments (percentiles.hpp),
    // the turns counted across them.
    const int segment_rounds = std::max(1, rounds / gpumem::bench::kSegments);
    enum class turn_passed { once_the_ticket_is_taken, after_unlock };
    const auto stream_lock_turn = [&](turn_passed when) {
      reset_scratch();
      const auto per_turn = in_parties(2, [&](int party) {
        auto client = gpumem::Client::connect(connect);
        auto lock = client.lock("bench.stream");
        stream_t stream = make_stream();
        lock.lock(stream);  // maps the pages before timing
        lock.unlock(stream);
        synchronize(stream);
        start_together(s, 2);
        const auto me = static_cast<std::uint32_t>(party);
        std::uint32_t round = 0;
        return gpumem::bench::median_of_segments([&](int) {
          auto start = clock_type::now();
          for (int i = 0; i < segment_rounds; ++i, ++round) {
            while (word(s.turn).load() != 2u * round + me) {
            }
            lock.lock(stream);
            if (when == turn_passed::once_the_ticket_is_taken) {
              word(s.turn).store(2u * round + me + 1);
            }
            lock.unlock(stream);
            if (when == turn_passed::after_unlock) word(s.turn).store(2u * round + me + 1);
          }
          synchronize(stream);
          return nanos_since(start) / 1000.0 / (2.0 * segment_rounds);
        });
      });
      return largest_unless_failed(per_turn);
    };
    // The raw peer three ways: free-running (each process queues its writes and waits as fast
    // as it can); taking host turns as the lock's after-unlock shape does, each passed once the
    // release is queued (two processes' driver calls then follow one another instead of
    // overlapping); and releasing as the lock does, the next turn and a host word in one
    // cuStreamBatchMemOp (the lock clears the released ticket's queue entry on the host page,
    // which is how the host learns that a turn has passed). Between them they split the
    // after-unlock shape's time into what the host turns, the release's host write and the lock's
    // own work each cost.
    enum class raw_peer { free_running, host_turns, release_as_the_lock };
    const auto raw_ping_pong = [&](raw_peer peer) {
      reset_scratch();
      void* host_page =
          ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      if (host_page == MAP_FAILED) throw std::runtime_error("mmap");
      const bool turns = peer != raw_peer::free_running;
      const auto per_turn = in_parties(2, [&](int) {
        auto client = gpumem::Client::connect(connect);
        auto pair = client.barrier("bench.raw-memops." + std::to_string(static_cast<int>(peer)), 2);
        const auto party = static_cast<int>(pair.party());
        const auto counters = pair.device(0);
        const gpumem::cuda::driver_api& cu = *gpumem::cuda::driver();
        stream_t stream = make_stream();
        const auto mine = reinterpret_cast<CUdeviceptr>(counters.counts + party);
        const auto theirs = reinterpret_cast<CUdeviceptr>(counters.counts + (1 - party));
        const auto me = static_cast<std::uint32_t>(party);
        CUdeviceptr host_word = 0;
        if (peer == raw_peer::release_as_the_lock &&
            (cu.cuMemHostRegister(host_page, 4096,
                                  CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE) !=
                 CUDA_SUCCESS ||
             cu.cuMemHostGetDevicePointer(&host_word, host_page, 0) != CUDA_SUCCESS)) {
          throw std::runtime_error("cuMemHostRegister of the host word");
        }
        const auto release = [&](std::uint32_t value) {
          if (peer != raw_peer::release_as_the_lock) {
            cu.cuStreamWriteValue32(stream, mine, value, 0);
            return;
          }
          CUstreamBatchMemOpParams writes[2]{};
          const std::pair<CUdeviceptr, std::uint32_t> words[2]{{mine, value},
                                                               {host_word + 4u * me, 0}};
          for (int i = 0; i < 2; ++i) {
            writes[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
            writes[i].writeValue.address = words[i].first;
            writes[i].writeValue.value = words[i].second;
          }
          cu.cuStreamBatchMemOp(stream, 2, writes, 0);
        };
        start_together(s, 2);
        std::uint32_t round = 0;
        const double figure = gpumem::bench::median_of_segments([&](int) {
          auto start = clock_type::now();
          for (int k = 0; k < segment_rounds; ++k) {
            const std::uint32_t turn = 2u * round + me;
            const std::uint32_t value = ++round;
            while (turns && word(s.turn).load() != turn) {
            }
            if (party == 0) release(value);
            cu.cuStreamWaitValue32(stream, theirs, value, CU_STREAM_WAIT_VALUE_GEQ);
            if (party == 1) release(value);
            if (turns) word(s.turn).store(turn + 1);
          }
          synchronize(stream);
          return nanos_since(start) / 1000.0 / (2.0 * segment_rounds);
        });
        if (host_word != 0) cu.cuMemHostUnregister(host_page);
        return figure;
      });
      ::munmap(host_page, 4096);
      return largest_unless_failed(per_turn);
    };
    print_ratio("stream-ordered lock hand-off (us)",
                stream_lock_turn(turn_passed::once_the_ticket_is_taken),
                raw_ping_pong(raw_peer::free_running), "us",
                "target <= 1.3, cuStreamWrite/WaitValue32");
    const double host_bound_turn = stream_lock_turn(turn_passed::after_unlock);
    print_ratio("the same, turns passed after unlock (us)", host_bound_turn,
                raw_ping_pong(raw_peer::host_turns), "us",
                "the same memops, taking the same host turns");
    print_ratio("the same, turns passed after unlock (us)", host_bound_turn,
                raw_ping_pong(raw_peer::release_as_the_lock), "us",
                "the same, releasing a host word too, in one batch");

    // Device lock: kernels of two processes take turns; only concurrent under MPS.
    if (!mps) {
      std::printf(
          "device lock hand-off skipped: kernels of two processes only run together "
          "under MPS\n");
    } else {
      const int device_rounds = rounds;
      double with_lock = 0;
      for (const bool through_lock : {true, false}) {
        reset_scratch();
        const auto turns = in_parties(2, [&](int party) {
          auto client = gpumem::Client::connect(connect);
          auto lock = client.lock("bench.device");
          stream_t stream = make_stream();
          auto turn = party == 0 ? client.allocate(
                                       4096, {.device = 0, .name = "bench.turn", .stream = stream})
                                 : gpumem::Buffer{};
          if (party == 0) {
            zero_on_device(turn.data(), 4096, stream);
            synchronize(stream);
          }
          start_together(s, 2);
          if (party == 1) turn = client.open("bench.turn", {.stream = stream});
          auto done = client.allocate(4096, {.device = 0, .stream = stream});
          const auto ref = lock.device(0);
          word(s.turn).fetch_add(1);
          while (word(s.turn).load() < 2) {
          }
          auto start = clock_type::now();
          auto* t = static_cast<unsigned*>(turn.data());
          auto* d = static_cast<unsigned*>(done.data());
          const auto me = static_cast<unsigned>(party);
          const auto count = static_cast<unsigned>(device_rounds);
          if (through_lock) {
            device_lock_ping_pong(ref, t, me, count, d, stream);
          } else {
            spin_ping_pong(t, me, count, d, stream);
          }
          synchronize(stream);
          const double elapsed = nanos_since(start) / 1000.0;
          unsigned completed = 0;
          copy_to_host(&completed, d, sizeof completed, stream);
          return completed == count ? elapsed / (2.0 * count) : kFailed;
        });
        const double per_turn = largest_unless_failed(turns);
        if (through_lock) {
          with_lock = per_turn;
        } else {
          print_ratio("device lock hand-off under MPS (us)", with_lock, per_turn, "us",
                      "target <= 1.5, SM spin ping-pong");
        }
      }
    }

    // Channel: 1 MiB items from a producer process to a consumer process that copies each out,
    // one item per stream memory operation, then batches of 8, against the same copies from the
    // same slots without the channel (time_against_the_copies_alone). Segments of `items` items;
    // the slots hold bytes already and the producer only hands them on, so the figure is the
    // consumer's read rate through the channel, not two processes sharing HBM.
    constexpr std::size_t kItem = 1 << 20;
    constexpr std::uint32_t kChannelSlots = 16;
    const int items = 2000;
    const auto channel_rates = [&](std::uint32_t batch) {
      reset_scratch();
      const auto parties = in_parties(2, [&](int party) {
        auto client = gpumem::Client::connect(connect);
        stream_t stream = make_stream();
        const gpumem::ChannelOptions options{
            .slots = kChannelSlots, .slot_bytes = kItem, .device = 0};
        auto pipe = client.channel(
            "bench.frames." + std::to_string(batch),
            party == 0 ? gpumem::ChannelRole::producer : gpumem::ChannelRole::consumer, options);
        auto own = client.allocate(kItem, {.device = 0, .stream = stream});
        zero_on_device(own.data(), kItem, stream);
        synchronize(stream);
        start_together(s, 2);
        if (party == 0) {
          const bool handed_on = hand_on_segment_by_segment(s, pipe, [&] {
            for (int i = 0; i < items; i += static_cast<int>(batch)) {
              pipe.acquire_slot(stream, batch);
              pipe.publish(stream, batch);
            }
            synchronize(stream);
          });
          return handed_on ? 0.0 : kFailed;
        }
        const auto rate_of = [&](const std::function<void()>& copies) {
          auto start = clock_type::now();
          copies();
          synchronize(stream);
          return items * double(kItem) / nanos_since(start);  // GB/s
        };
        const auto through_channel = [&] {
          return rate_of([&] {
            for (int i = 0; i < items; i += static_cast<int>(batch)) {
              const auto first = pipe.acquire(stream, batch);
              for (std::uint32_t k = 0; k < batch; ++k) {
                copy_on_device(own.data(), pipe.slot_data(first.sequence + k), kItem, stream);
              }
              pipe.release(stream, batch);
            }
          });
        };
        const auto alone = [&] {
          return rate_of([&] {
            for (int i = 0; i < items; ++i) {
              copy_on_device(own.data(), pipe.slot_data(static_cast<std::uint64_t>(i)), kItem,
                             stream);
            }
          });
        };
        return time_against_the_copies_alone(s, pipe, through_channel, alone) ? 0.0 : kFailed;
      });
      return paired_result(s, parties);
    };
    // The same two processes, slots and copies through bare stream memory operations on two
    // words of a signal page: what a channel is built on, without its checks and bookkeeping.
    const auto bare_channel_rate = [&](std::uint32_t batch) {
      reset_scratch();
      const auto rates = in_parties(2, [&](int) {
        auto client = gpumem::Client::connect(connect);
        auto pair = client.barrier("bench.bare-channel." + std::to_string(batch), 2);
        const bool producing = pair.party() == 0;
        const auto counters = pair.device(0);
        const gpumem::cuda::driver_api& cu = *gpumem::cuda::driver();
        const auto published = reinterpret_cast<CUdeviceptr>(counters.counts);
        const auto released = reinterpret_cast<CUdeviceptr>(counters.counts + 1);
        stream_t stream = make_stream();
        constexpr std::uint32_t kSlots = kChannelSlots;
        auto slots = client.allocate(kSlots * kItem, {.device = 0, .stream = stream});
        auto own = client.allocate(kItem, {.device = 0, .stream = stream});
        zero_on_device(own.data(), kItem, stream);
        synchronize(stream);
        start_together(s, 2);
        std::uint32_t handed_on = 0;  // items, counted across segments
        const double rate = gpumem::bench::median_of_segments([&](int) {
          auto start = clock_type::now();
          for (int n = 0; n < items; n += static_cast<int>(batch), handed_on += batch) {
            const std::uint32_t through = handed_on + batch;
            if (producing) {
              if (through > kSlots) {
                cu.cuStreamWaitValue32(stream, released, through - kSlots,
                                       CU_STREAM_WAIT_VALUE_GEQ);
              }
              cu.cuStreamWriteValue32(stream, published, through, 0);
            } else {
              cu.cuStreamWaitValue32(stream, published, through, CU_STREAM_WAIT_VALUE_GEQ);
              for (std::uint32_t k = 0; k < batch; ++k) {
                const std::size_t slot = (handed_on + k) % kSlots;
                copy_on_device(own.data(), static_cast<char*>(slots.data()) + slot * kItem, kItem,
                               stream);
              }
              cu.cuStreamWriteValue32(stream, released, through, 0);
            }
          }
          if (producing) return 0.0;
          synchronize(stream);
          return items * double(kItem) / nanos_since(start);  // GB/s
        });
        synchronize(stream);
        return rate;
      });
      return largest_unless_failed(rates);
    };
    const auto one_at_a_time = channel_rates(1);
    const auto in_batches = channel_rates(8);
    const double bare_one_at_a_time = bare_channel_rate(1);
    const double bare_in_batches = bare_channel_rate(8);
    const auto copies = in_parties(1, [&](int) {
      auto client = gpumem::Client::connect(connect);
      stream_t stream = make_stream();
      auto from = client.allocate(kItem, {.device = 0, .stream = stream});
      auto to = client.allocate(kItem, {.device = 0, .stream = stream});
      synchronize(stream);
      return gpumem::bench::median_of_segments([&](int) {
        auto start = clock_type::now();
        for (int i = 0; i < items; ++i) copy_on_device(to.data(), from.data(), kItem, stream);
        synchronize(stream);
        return items * double(kItem) / nanos_since(start);
      });
    });
    // What one stream-ordered hand-on per item costs the copies with nothing else around it:
    // each copy followed by one stream write, one process, no wait. On an H200 the GPU spent
    // 1.8 us on a write and 1.1-1.2 us on a wait already satisfied, against 3.8-5 us for a
    // 1 MiB copy; the host submitted a write in 0.9-1.3 us and then waited for the GPU.
    const auto copies_with_a_write = in_parties(1, [&](int) {
      auto client = gpumem::Client::connect(connect);
      auto alone = client.barrier("bench.copy-then-write", 1);
      const auto written = reinterpret_cast<CUdeviceptr>(alone.device(0).counts);
      const gpumem::cuda::driver_api& cu = *gpumem::cuda::driver();
      stream_t stream = make_stream();
      auto from = client.allocate(kItem, {.device = 0, .stream = stream});
      auto to = client.allocate(kItem, {.device = 0, .stream = stream});
      synchronize(stream);
      std::uint32_t count = 0;
      return gpumem::bench::median_of_segments([&](int) {
        auto start = clock_type::now();
        for (int i = 0; i < items; ++i) {
          copy_on_device(to.data(), from.data(), kItem, stream);
          cu.cuStreamWriteValue32(stream, written, ++count, 0);
        }
        synchronize(stream);
        return items * double(kItem) / nanos_since(start);
      });
    });
    print_paired("channel, 1 MiB items, consumer copy (GB/s)", one_at_a_time,
                 "target >= 0.9, the same copies alone; median of segment ratios");
    print_paired("channel, 1 MiB items in batches of 8 (GB/s)", in_batches,
                 "target >= 0.9, the same copies alone; median of segment ratios");
    print_ratio("channel, 1 MiB items, vs bare memops (GB/s)",
                one_at_a_time ? one_at_a_time->channel : kFailed, bare_one_at_a_time, "GB/s",
                "the channel's own cost: wait, copy, write per item");
    print_ratio("channel, batches of 8, vs bare memops (GB/s)",
                in_batches ? in_batches->channel : kFailed, bare_in_batches, "GB/s",
                "the channel's own cost: wait, 8 copies, write");
    print_ratio("bare memops, 1 MiB items (GB/s)", bare_one_at_a_time, copies[0], "GB/s",
                "the mechanism's cost over the copies alone");
    print_ratio("copies with one stream write each (GB/s)", copies_with_a_write[0], copies[0],
                "GB/s", "one hand-on per item, no wait, one process");

    // The same channel with both ends in kernels (gpumem/device.cuh), which run together only
    // under MPS: a producer kernel hands slots on as the consumer releases them; a consumer
    // kernel of kBlocks blocks takes one item per block at a time, waits for it, copies it out
    // and releases it after the items before it. Against the same kernel copying the same
    // slots with no channel (time_against_the_copies_alone).
    if (!mps) {
      std::printf(
          "channel in kernels skipped: kernels of two processes run together only "
          "under MPS\n");
    } else {
      // More slots than blocks would let the producer run ahead, but on an H200 32 slots of
      // 1 MiB and the blocks' 16 MiB no longer stay in L2: the copies alone fell from 677-741 to
      // 594-606 GB/s and the channel from 608-661 to 548-558, a better ratio from slower copies.
      constexpr unsigned kSlots = 16;
      constexpr unsigned kBlocks = 16;
      reset_scratch();
      const auto parties = in_parties(2, [&](int party) {
        auto client = gpumem::Client::connect(connect);
        stream_t stream = make_stream();
        const gpumem::ChannelOptions options{.slots = kSlots, .slot_bytes = kItem, .device = 0};
        auto pipe = client.channel(
            "bench.kernel-frames",
            party == 0 ? gpumem::ChannelRole::producer : gpumem::ChannelRole::consumer, options);
        const auto ref = pipe.device(0);
        auto to = client.allocate(kBlocks * kItem, {.device = 0, .stream = stream});
        synchronize(stream);
        start_together(s, 2);
        unsigned first = 0;  // items through the channel so far
        if (party == 0) {
          // One hand-on kernel per segment. Launched after the consumer's clock started, it costs
          // the channel half some 10-20 us of 3 ms.
          const bool handed_on = hand_on_segment_by_segment(s, pipe, [&] {
            hand_on_in_kernel(ref, kSlots, first, first + items, stream);
            first += items;
            synchronize(stream);
          });
          return handed_on ? 0.0 : kFailed;
        }
        // The copies alone read the slots from the first on, the channel's from its next item.
        const auto rate = [&](bool through_channel) {
          auto start = clock_type::now();
          copy_items_in_kernel(through_channel ? &ref : nullptr, pipe.slot_data(0), kSlots, kItem,
                               through_channel ? first : 0, items, to.data(), kBlocks, stream);
          synchronize(stream);
          if (through_channel) first += items;
          return items * double(kItem) / nanos_since(start);  // GB/s
        };
        const bool intact = time_against_the_copies_alone(
            s, pipe, [&] { return rate(true); }, [&] { return rate(false); });
        return intact ? 0.0 : kFailed;
      });
      print_paired("channel in kernels, 1 MiB items (GB/s)", paired_result(s, parties),
                   "target >= 0.9, the same kernel's copies alone; median of segment ratios");
    }
  }
#endif
  return 0;
}
