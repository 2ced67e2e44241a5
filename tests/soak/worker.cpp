#include "worker.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "gpumem/gpumem.hpp"
#include "gpumem/sync.hpp"

namespace gpumem::soak {

namespace {

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kReportInterval = 100ms;
/// Time an operation may take beyond its own wait before it counts as slow: generous, since
/// the test machine is shared and the daemon may be busy cleaning up after a killed client.
constexpr auto kSlack = 5s;
constexpr std::size_t kMaxHeld = 16;
constexpr int kSharedNames = 8;  // buffers, locks and barriers are picked among this many names

volatile sig_atomic_t stop_requested = 0;

class worker {
 public:
  explicit worker(const worker_options& options)
      : options_(options), random_(options.seed), client_(connect()) {}

  int run() {
    auto last_report = clock::now();
    while (!stop_requested) {
      step();
      if (clock::now() - last_report >= kReportInterval) {
        report("progress");
        last_report = clock::now();
      }
    }
    timed("let go of everything", 0ms, [&] { drop_all(); });
    report("done");
    return report_.unexpected == 0 && report_.slow == 0 ? 0 : 1;
  }

 private:
  Client connect() {
    return Client::connect({.socket_path = options_.socket_path, .label = "soak"});
  }

  std::uint32_t pick(std::uint32_t below) {
    return std::uniform_int_distribution<std::uint32_t>(0, below - 1)(random_);
  }
  std::string shared_name(const char* kind) {
    return std::string("soak.") + kind + "." + std::to_string(pick(kSharedNames));
  }

  void report(const char* what) {
    std::printf("%s %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", what, report_.ops, report_.unexpected,
                report_.slow);
    std::fflush(stdout);
  }

  /// Runs @p op, which may wait up to @p wait by design; errors with a code in @p expected are
  /// part of the game (a name taken, a party count reached), any other is counted.
  void timed(const char* what, std::chrono::nanoseconds wait, const std::function<void()>& op,
             std::initializer_list<errc> expected = {}) {
    const auto start = clock::now();
    try {
      op();
    } catch (const Error& error) {
      if (std::find(expected.begin(), expected.end(), error.status()) == expected.end()) {
        ++report_.unexpected;
        std::fprintf(stderr, "soak worker %d: %s: %s\n", ::getpid(), what, error.what());
      }
    }
    const auto took = clock::now() - start;
    if (took > wait + kSlack) {
      ++report_.slow;
      std::fprintf(stderr, "soak worker %d: %s took %lld ms\n", ::getpid(), what,
                   static_cast<long long>(
                       std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
    }
    ++report_.ops;
  }

  void hold(Buffer buffer) {
    if (buffers_.size() == kMaxHeld) buffers_.pop_front();
    if (buffer.access() == Access::read_write)
      static_cast<std::byte*>(buffer.data())[0] = std::byte{1};
    buffers_.push_back(std::move(buffer));
  }

  void step() {
    switch (pick(12)) {
      case 0:
      case 1:
        timed("allocate", 0ms, [&] { hold(client_.allocate(1 + pick(256 << 10))); });
        break;
      case 2:
        timed(
            "allocate a named buffer", 0ms,
            [&] { hold(client_.allocate(4096 + pick(64 << 10), {.name = shared_name("buffer")})); },
            {errc::already_exists});
        break;
      case 3:
        timed("open", 0ms,
              [&] {
                const auto access = pick(2) ? Access::read_only : Access::read_write;
                hold(client_.open(shared_name("buffer"), {.access = access}));
              },
              {errc::not_found});
        break;
      case 4:
        timed("release", 0ms, [&] {
          if (buffers_.empty()) return;
          const std::size_t which = pick(static_cast<std::uint32_t>(buffers_.size()));
          buffers_[which].release();
          buffers_.erase(buffers_.begin() + static_cast<std::ptrdiff_t>(which));
        });
        break;
      case 5:
      case 6:
        lock_once();
        break;
      case 7:
        barrier_once();
        break;
      case 8:
        channel_once();
        break;
      case 9:
        timed("ping and stats", 0ms, [&] {
          client_.ping();
          (void)client_.stats();
        });
        break;
      case 10:
        timed("list", 0ms, [&] {
          (void)client_.allocations();
          (void)client_.sync_objects();
          (void)client_.clients();
        });
        break;
      case 11:
        if (pick(8) == 0) {
          timed("reconnect", 0ms, [&] {
            drop_all();
            client_ = connect();
          });
        } else {
          timed("close a lock", 0ms, [&] {
            if (!locks_.empty()) locks_.pop_front();
          });
        }
        break;
    }
  }

  void lock_once() {
    const auto wait = std::chrono::milliseconds(pick(50));
    timed("lock", wait, [&] {
      if (locks_.empty() || pick(4) == 0) {
        locks_.push_back(client_.lock(shared_name("lock")));
        if (locks_.size() > 4) locks_.pop_front();
      }
      Lock& lock = locks_[pick(static_cast<std::uint32_t>(locks_.size()))];
      const LockStatus status = lock.try_acquire_for(wait);
      if (status == LockStatus::timeout) return;
      if (status == LockStatus::acquired_owner_died) lock.mark_consistent();
      if (pick(2)) std::this_thread::sleep_for(std::chrono::microseconds(pick(2000)));
      lock.unlock();
    });
  }

  void barrier_once() {
    const auto wait = std::chrono::milliseconds(pick(50));
    timed("barrier", wait,
          [&] {
            Barrier barrier = client_.barrier(shared_name("barrier"), 2);
            (void)barrier.wait_for(barrier.arrive(), wait);
          },
          // Both places taken, or a place whose last holder died or left: broken until a reset.
          {errc::no_party_left, errc::wrong_state});
  }

  void channel_once() {
    // A channel of this process's own, so that no wait depends on another process.
    timed("channel", 0ms, [&] {
      const std::string name = "soak.channel." + std::to_string(::getpid());
      const ChannelOptions shape{.slots = 2, .slot_bytes = 4096, .consumers = 1};
      Channel producer = client_.channel(name, ChannelRole::producer, shape);
      Channel consumer = client_.channel(name, ChannelRole::consumer, shape);
      const std::uint64_t value = random_();
      Channel::Slot slot = producer.acquire_slot();
      std::memcpy(slot.data, &value, sizeof value);
      producer.publish();
      Channel::Slot item = consumer.acquire();
      std::uint64_t seen = 0;
      std::memcpy(&seen, item.data, sizeof seen);
      consumer.release();
      if (seen != value) {
        ++report_.unexpected;
        std::fprintf(stderr, "soak worker %d: channel item %" PRIx64 " read back as %" PRIx64 "\n",
                     ::getpid(), value, seen);
      }
    });
  }

  void drop_all() {
    locks_.clear();
    buffers_.clear();
  }

  worker_options options_;
  std::mt19937_64 random_;
  worker_report report_;
  Client client_;
  std::deque<Buffer> buffers_;
  std::deque<Lock> locks_;
};

}  // namespace

int run_worker(const worker_options& options) {
  struct sigaction on_term {};
  on_term.sa_handler = [](int) { stop_requested = 1; };
  ::sigaction(SIGTERM, &on_term, nullptr);
  try {
    return worker(options).run();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "soak worker %d: %s\n", ::getpid(), error.what());
    std::printf("done 0 1 0\n");
    return 1;
  }
}

}  // namespace gpumem::soak
