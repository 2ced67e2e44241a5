// Restart without loss on a GPU: a real gpumemd under the stand-in for systemd
// (support/systemd_supervisor) keeps its CUDA pools, reservation chunks and signal pages in the
// fd store; it is SIGKILLed and started again with them while real CUDA client processes
// (gpu_peer.cpp, gpu_sync_peer.cpp) hold what it handed out. Every test skips, with the reason,
// where no CUDA device is usable, and fails instead under GPUMEM_REQUIRE_GPU=1 (scripts/gpu-check).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"
#include "gpumem/sync.hpp"
#include "kernels.hpp"
#include "support/child_process.hpp"
#include "support/systemd_supervisor.hpp"
#include "sync_kernels.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;
/// How far two measurements of the same device state may differ: the restarted daemon's
/// context against its predecessor's. Below the smallest object these tests allocate (128 MiB),
/// so that any of them left behind fails.
constexpr std::uint64_t kSlack = 32 * kMiB;
/// How long device memory may take to come back after its last holder went.
constexpr auto kMemoryReturnTimeout = 20s;

bool gpu_required() {
  const char* required = std::getenv("GPUMEM_REQUIRE_GPU");
  return required != nullptr && std::string_view(required) == "1";
}

std::string mib(std::uint64_t bytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / kMiB << " MiB";
  return text.str();
}

std::uint8_t* at(void* base, std::size_t offset) {
  return static_cast<std::uint8_t*>(base) + offset;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : " ") + name;
  return text.empty() ? "(none)" : text;
}

/// The fd store's name of a pool instance's descriptor (daemon/restart/state_records.cpp).
std::string pool_fd_name(std::uint32_t pool) {
  return "pool." + std::to_string(pool);
}
constexpr std::string_view kChunkFdPrefix = "chunk.";

class GpuRestart : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto why = why_no_gpu(); !why.empty()) {
      if (gpu_required()) FAIL() << "GPUMEM_REQUIRE_GPU=1 and this GPU test skipped: " << why;
      GTEST_SKIP() << why;
    }
    daemon = std::make_unique<systemd_supervisor>(systemd_supervisor::options{});
    daemon->start();
    client.emplace(daemon->connect("gpu-restart-test"));
    const Stats stats = client->stats();
    ASSERT_TRUE(stats.cuda) << "the daemon found no CUDA device";
    ASSERT_TRUE(stats.state_kept) << "the daemon keeps no state under the supervisor";
  }
  void TearDown() override {
    if (stream != nullptr) destroy_stream(stream);
  }

  child_process gpu_peer(const std::vector<std::string>& args) const {
    return run(GPUMEM_TEST_GPU_PEER, args);
  }
  child_process sync_peer(const std::vector<std::string>& args) const {
    return run(GPUMEM_TEST_GPU_SYNC_PEER, args);
  }

  /// Whether @p process's next line starts with @p expected (the line is kept in `heard`); the
  /// failure says what came instead and how gpumemd's log ends.
  ::testing::AssertionResult says(child_process& process, const std::string& expected,
                                  std::chrono::milliseconds within = 60s) {
    const auto line = process.read_line(within);
    heard = line.value_or("");
    if (line && line->starts_with(expected)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "process " << process.pid() << " was to say '" << expected << "', said "
           << (line ? "'" + *line + "'"
                    : "nothing within " + std::to_string(within.count()) + " ms")
           << "\ngpumemd's log ends:\n"
           << daemon->log_tail(2000);
  }
  /// The number after "ready " in the line last heard.
  std::uint64_t ready_id() const { return std::stoull(heard.substr(heard.find(' ') + 1)); }

  static ::testing::AssertionResult exits_cleanly(child_process& process) {
    const auto status = process.wait(30s);
    if (!status) {
      return ::testing::AssertionFailure()
             << "process " << process.pid() << " still runs 30 s after its last line";
    }
    if (exit_code(*status) != 0) {
      return ::testing::AssertionFailure()
             << "process " << process.pid() << " ended with " << exit_code(*status);
    }
    return ::testing::AssertionSuccess();
  }

  std::optional<AllocationInfo> allocation_named(const std::string& name) {
    for (const auto& each : client->allocations()) {
      if (each.name == name) return each;
    }
    return std::nullopt;
  }
  std::optional<ReservationInfo> reservation_named(const std::string& name) {
    for (const auto& each : client->reservations()) {
      if (each.name == name) return each;
    }
    return std::nullopt;
  }
  /// The daemon's client of @p process (the ledger's row, whether or not it is connected now).
  std::optional<ClientInfo> client_of(const child_process& process) {
    for (const auto& each : client->clients()) {
      if (each.pid == static_cast<std::uint32_t>(process.pid())) return each;
    }
    return std::nullopt;
  }

  bool is_stored(const std::string& name) const {
    for (const std::string& each : daemon->stored_names()) {
      if (each == name) return true;
    }
    return false;
  }
  std::vector<std::string> stored_chunks() const {
    std::vector<std::string> chunks;
    for (std::string& each : daemon->stored_names()) {
      if (each.starts_with(kChunkFdPrefix)) chunks.push_back(std::move(each));
    }
    return chunks;
  }

  /// Free device memory as a fresh CUDA process sees it: the same program each time, so that
  /// its own context weighs the same in every measurement. nullopt, reported, when the probe
  /// fails.
  std::optional<std::uint64_t> free_device_memory() {
    auto probe = gpu_peer({"free-memory"});
    if (const auto said = says(probe, "free "); !said) {
      ADD_FAILURE() << "the free-memory probe failed: " << said.message();
      return std::nullopt;
    }
    probe.wait(30s);  // its context is gone before the next probe starts
    return std::stoull(heard.substr(5));
  }

  /// Polls until a fresh process sees as much device memory free as at @p baseline, within
  /// kSlack; the failure says how much is missing and what the daemon still holds.
  void expect_device_memory_back(std::uint64_t baseline) {
    const auto deadline = std::chrono::steady_clock::now() + kMemoryReturnTimeout;
    std::optional<std::uint64_t> now;
    for (;;) {
      now = free_device_memory();
      if (!now || *now + kSlack >= baseline) return;
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(250ms);
    }
    ADD_FAILURE() << "device memory is not back "
                  << std::chrono::duration_cast<std::chrono::seconds>(kMemoryReturnTimeout).count()
                  << " s after the last holder went: " << mib(*now) << " free, " << mib(baseline)
                  << " before the test allocated: " << mib(baseline - *now) << " missing ("
                  << mib(kSlack) << " allowed)\n"
                  << daemon_holdings();
  }

  /// What the daemon still lists and keeps, for failure messages.
  std::string daemon_holdings() {
    std::ostringstream text;
    for (const auto& each : client->allocations()) {
      text << "allocation " << each.id << " '" << each.name << "': " << mib(each.size)
           << " in pool instance " << each.pool << ", " << each.holders << " holder(s)\n";
    }
    for (const auto& each : client->reservations()) {
      text << "reservation " << each.id << " '" << each.name << "': " << mib(each.committed)
           << " committed, " << each.holders << " holder(s)\n";
    }
    for (const auto& pool : client->stats().pools) {
      if (pool.device == kHost) continue;
      text << "pool '" << pool.name << "': " << mib(pool.bytes_in_use) << " in use, the driver "
           << "reserves " << mib(pool.driver_reserved_current) << "\n";
    }
    text << "fd store: " << joined(daemon->stored_names());
    return text.str();
  }

  bool idle_within(std::chrono::milliseconds bound) const {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (!stream_idle(stream)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }

  std::unique_ptr<systemd_supervisor> daemon;
  std::optional<gpumem::Client> client;  // connected before the first restart: resumes after it
  stream_t stream = nullptr;             // made by the tests that run kernels in this process
  std::string heard;

 private:
  child_process run(const std::string& program, const std::vector<std::string>& args) const {
    std::vector<std::string> argv{program};
    argv.insert(argv.end(), args.begin(), args.end());
    return child_process(argv, {daemon->socket_env()});
  }
};

TEST_F(GpuRestart, ANamedGigabyteKeepsEveryByteAndItsHoldersThroughASigkill) {
  auto producer = gpu_peer({"produce", "weights", std::to_string(kGiB), "17"});
  ASSERT_TRUE(says(producer, "ready "));
  const std::uint64_t id = ready_id();
  const auto before = allocation_named("weights");
  ASSERT_TRUE(before) << "the producer's buffer is not listed";
  const auto producer_client = client_of(producer);
  ASSERT_TRUE(producer_client) << "the producer is not among the daemon's clients";
  ASSERT_EQ(before->owner_client, producer_client->id);

  daemon->restart(SIGKILL);

  // A process that never knew the killed daemon opens it by name; a kernel checks every byte.
  auto reader = gpu_peer({"consume", "weights", std::to_string(kGiB), "17"});
  EXPECT_TRUE(says(reader, "ok")) << "the bytes after the restart";
  EXPECT_TRUE(exits_cleanly(reader));
  auto holder = gpu_peer({"hold", "weights"});
  ASSERT_TRUE(says(holder, "ready "));
  EXPECT_EQ(ready_id(), id) << "the name opens another allocation than before the restart";

  const auto after = allocation_named("weights");
  ASSERT_TRUE(after) << "listed before the restart, not after it";
  EXPECT_EQ(after->id, id);
  EXPECT_EQ(after->size, kGiB);
  EXPECT_EQ(after->pool, before->pool) << "the allocation moved to another pool instance";
  EXPECT_EQ(after->owner_client, producer_client->id)
      << "the producer's session from before the restart no longer owns it";
  EXPECT_EQ(after->holders, 2u) << "holders: the producer from before the restart and one since";
  const auto producer_after = client_of(producer);
  ASSERT_TRUE(producer_after) << "the producer's client row did not outlive the daemon";
  EXPECT_EQ(producer_after->id, producer_client->id);
  EXPECT_EQ(producer_after->allocations_owned, 1u);
  const auto holder_client = client_of(holder);
  ASSERT_TRUE(holder_client);
  EXPECT_EQ(holder_client->allocations_opened, 1u);

  // The producer's next call reconnects and resumes its session: its release counts.
  producer.signal(SIGTERM);
  EXPECT_TRUE(says(producer, "released"));
  EXPECT_TRUE(exits_cleanly(producer));
  const auto left = allocation_named("weights");
  ASSERT_TRUE(left) << "the holder's reference went with the producer's";
  EXPECT_EQ(left->holders, 1u);
  EXPECT_EQ(left->owner_client, 0u) << "the owner let go";
  holder.signal(SIGTERM);
  EXPECT_TRUE(says(holder, "released"));
  EXPECT_TRUE(exits_cleanly(holder));
  EXPECT_FALSE(allocation_named("weights")) << "listed after its last holder let go";
  // The pool instance from before the restart holds nothing now: closed, and out of the store.
  EXPECT_TRUE(daemon->wait_for([&] { return !is_stored(pool_fd_name(before->pool)); }, 2s))
      << "the fd store still keeps " << pool_fd_name(before->pool) << ": "
      << joined(daemon->stored_names());
}

TEST_F(GpuRestart, AReservationKeepsItsBytesThroughASigkillAndItsOwnerGrowsItAfterwards) {
  constexpr std::size_t kMax = kGiB;
  constexpr std::size_t kInitial = 128 * kMiB;
  constexpr std::size_t kGrown = 256 * kMiB;
  stream = make_stream();
  auto owner = gpu_peer({"reservation-own", "kv", std::to_string(kMax), std::to_string(kInitial),
                         "41", std::to_string(kGrown), "42"});
  ASSERT_TRUE(says(owner, "ready "));
  const std::uint64_t id = ready_id();
  const auto owner_client = client_of(owner);
  ASSERT_TRUE(owner_client) << "the owner is not among the daemon's clients";
  ASSERT_FALSE(stored_chunks().empty()) << "the reservation's chunks are not in the fd store";

  daemon->restart(SIGKILL);

  auto verifier = gpu_peer({"reservation-verify", "kv", std::to_string(kInitial), "41"});
  EXPECT_TRUE(says(verifier, "ok")) << "a new process maps the reservation and checks its bytes";
  EXPECT_TRUE(exits_cleanly(verifier));
  // This process maps it too, read-write, and holds it while the owner grows it.
  auto held = Reservation::open(*client, "kv");
  ASSERT_EQ(held.size(), kInitial);
  void* const base = held.data();
  EXPECT_EQ(mismatches_on_device(base, kInitial, 41, stream), 0u)
      << "bytes that differ of the " << mib(kInitial) << " committed before the restart";
  const auto after = reservation_named("kv");
  ASSERT_TRUE(after) << "listed before the restart, not after it";
  EXPECT_EQ(after->id, id);
  EXPECT_EQ(after->max_size, kMax);
  EXPECT_EQ(after->committed, kInitial);
  EXPECT_EQ(after->owner_client, owner_client->id)
      << "the owner's session from before the restart no longer owns it";
  EXPECT_EQ(after->holders, 2u) << "holders: the owner from before the restart and this process";

  // The owner's next call reconnects and resumes its session, so it may still resize: the new
  // chunks come from the restarted daemon, the old ones from the fd store.
  owner.signal(SIGUSR1);
  ASSERT_TRUE(says(owner, "grown " + std::to_string(kGrown)));
  ASSERT_TRUE(reservation_named("kv"));
  EXPECT_EQ(reservation_named("kv")->committed, kGrown);
  ASSERT_EQ(held.refresh(), kGrown);
  EXPECT_EQ(held.data(), base) << "growing moved the range";
  EXPECT_EQ(mismatches_on_device(base, kInitial, 41, stream), 0u)
      << "bytes that differ of the part committed before the restart";
  EXPECT_EQ(mismatches_on_device(at(base, kInitial), kGrown - kInitial, 42, stream), 0u)
      << "bytes that differ of the part the owner committed and filled after the restart";
  // Filled from the start of the range, so that the new part's bytes differ from the owner's
  // fill, which began at kInitial, whatever the seeds do.
  fill_on_device(base, kGrown, 43, stream);
  synchronize(stream);
  owner.signal(SIGUSR2);
  EXPECT_TRUE(says(owner, "ok")) << "the owner reads what this process wrote";
  try {
    held.resize(kMax);
    ADD_FAILURE() << "a holder that is not the owner resized the reservation";
  } catch (const gpumem::Error& error) {
    EXPECT_EQ(error.status(), gpumem::errc::permission_denied) << error.what();
  }

  owner.signal(SIGTERM);
  EXPECT_TRUE(says(owner, "released"));
  EXPECT_TRUE(exits_cleanly(owner));
  const auto left = reservation_named("kv");
  ASSERT_TRUE(left) << "this process's reference went with the owner's";
  EXPECT_EQ(left->holders, 1u);
  EXPECT_EQ(left->owner_client, 0u) << "the owner let go";
  held.release();
  EXPECT_FALSE(reservation_named("kv")) << "listed after its last holder let go";
  EXPECT_TRUE(daemon->wait_for([&] { return stored_chunks().empty(); }, 2s))
      << "the fd store still keeps chunks: " << joined(stored_chunks());
}

TEST_F(GpuRestart, AllDeviceMemoryReturnsOnceTheLastHolderAfterARestartExits) {
  constexpr std::size_t kInitial = 128 * kMiB;
  constexpr std::size_t kGrown = 256 * kMiB;
  // The daemon runs and nothing is allocated: whatever else uses the device is in both numbers.
  const auto baseline = free_device_memory();
  ASSERT_TRUE(baseline);
  auto producer = gpu_peer({"produce", "weights", std::to_string(kGiB), "5"});
  ASSERT_TRUE(says(producer, "ready "));
  auto owner = gpu_peer({"reservation-own", "kv", std::to_string(kGiB), std::to_string(kInitial),
                         "6", std::to_string(kGrown), "7"});
  ASSERT_TRUE(says(owner, "ready "));
  const auto buffer = allocation_named("weights");
  ASSERT_TRUE(buffer);
  const auto loaded = free_device_memory();
  ASSERT_TRUE(loaded);
  ASSERT_LE(*loaded + kGiB + kInitial, *baseline + kSlack)
      << "a fresh process sees " << mib(*loaded) << " free with " << mib(kGiB + kInitial)
      << " allocated and " << mib(*baseline) << " before: it does not see this device's memory";

  daemon->restart(SIGKILL);

  // Holders since the restart: one of the buffer, one of the reservation (gone again), and new
  // chunks that the restarted daemon made.
  auto holder = gpu_peer({"hold", "weights"});
  ASSERT_TRUE(says(holder, "ready "));
  auto verifier = gpu_peer({"reservation-verify", "kv", std::to_string(kInitial), "6"});
  EXPECT_TRUE(says(verifier, "ok"));
  EXPECT_TRUE(exits_cleanly(verifier));
  owner.signal(SIGUSR1);
  ASSERT_TRUE(says(owner, "grown " + std::to_string(kGrown)));

  // Every holder goes: the producer lets go through its resumed session, the others die.
  producer.signal(SIGTERM);
  EXPECT_TRUE(says(producer, "released"));
  EXPECT_TRUE(exits_cleanly(producer));
  holder.signal(SIGKILL);
  owner.signal(SIGKILL);
  ASSERT_TRUE(holder.wait(30s));
  ASSERT_TRUE(owner.wait(30s));
  EXPECT_TRUE(daemon->wait_for(
      [&] { return client->allocations().empty() && client->reservations().empty(); }, 2s))
      << "the daemon still holds, 2 s after the holders died:\n"
      << daemon_holdings();
  EXPECT_TRUE(daemon->wait_for(
      [&] { return !is_stored(pool_fd_name(buffer->pool)) && stored_chunks().empty(); }, 2s))
      << "the fd store still keeps what nobody holds: " << joined(daemon->stored_names());
  expect_device_memory_back(*baseline);
}

TEST_F(GpuRestart, CudaMemoryOfAClientThatDiedWhileNoDaemonRanIsFreedAtTheRestart) {
  constexpr std::size_t kReserved = 256 * kMiB;
  const auto baseline = free_device_memory();
  ASSERT_TRUE(baseline);
  auto producer = gpu_peer({"produce", "orphan", std::to_string(kGiB), "9"});
  ASSERT_TRUE(says(producer, "ready "));
  auto owner = gpu_peer({"reservation-hold", "orphan.kv", std::to_string(kReserved)});
  ASSERT_TRUE(says(owner, "ready "));
  const auto buffer = allocation_named("orphan");
  ASSERT_TRUE(buffer);
  ASSERT_TRUE(is_stored(pool_fd_name(buffer->pool)))
      << "the buffer's pool instance is not in the fd store: " << joined(daemon->stored_names());
  const auto loaded = free_device_memory();
  ASSERT_TRUE(loaded);
  ASSERT_LE(*loaded + kGiB + kReserved, *baseline + kSlack)
      << "a fresh process sees " << mib(*loaded) << " free with " << mib(kGiB + kReserved)
      << " allocated and " << mib(*baseline) << " before: it does not see this device's memory";

  daemon->kill(SIGKILL);
  producer.signal(SIGKILL);
  owner.signal(SIGKILL);
  ASSERT_TRUE(producer.wait(30s));
  ASSERT_TRUE(owner.wait(30s));
  daemon->start();

  EXPECT_FALSE(allocation_named("orphan")) << "a dead client's buffer outlived the restart";
  EXPECT_FALSE(reservation_named("orphan.kv")) << "a dead client's reservation outlived it";
  EXPECT_TRUE(daemon->wait_for(
      [&] { return !is_stored(pool_fd_name(buffer->pool)) && stored_chunks().empty(); }, 2s))
      << "the fd store still keeps what nobody holds: " << joined(daemon->stored_names());
  expect_device_memory_back(*baseline);
}

TEST_F(GpuRestart, AStreamOrderedLockHeldAcrossASigkillStaysHeldUntilItsHolderDies) {
  stream = make_stream();
  auto holder = sync_peer({"stream-lock-queue", "gpu.kept"});
  ASSERT_TRUE(says(holder, "queued"));

  daemon->restart(SIGKILL);

  auto lock = client->lock("gpu.kept");
  lock.lock(stream);
  EXPECT_FALSE(idle_within(500ms))
      << "this stream took the lock that another process held across the restart";
  holder.signal(SIGKILL);
  ASSERT_TRUE(holder.wait(30s));
  EXPECT_TRUE(idle_within(2s)) << "the holder's death after the restart did not pass the lock on";
  lock.unlock(stream);
  synchronize(stream);
  std::optional<SyncInfo> kept;
  for (const auto& each : client->sync_objects()) {
    if (each.name == "gpu.kept") kept = each;
  }
  ASSERT_TRUE(kept) << "the lock is not listed after the restart";
  EXPECT_EQ(kept->owner_deaths, 1u);
}

TEST_F(GpuRestart, ADeadClientsLockTurnThatWaitedAcrossASigkillIsPassedOnByTheNewDaemon) {
  stream = make_stream();
  stream_t held = make_stream();
  // This process holds the lock on a stream stopped at a gate; another process queues behind
  // it and dies, so the daemon waits for the dead process's turn to come.
  auto lock = client->lock("gpu.turn");
  auto gate = client->barrier("gpu.turn-gate", 2);
  auto opener = client->barrier("gpu.turn-gate", 2);
  lock.lock(held);
  gate.wait(gate.arrive(held), held);
  lock.unlock(held);
  auto queued = sync_peer({"stream-lock-queue", "gpu.turn"});
  ASSERT_TRUE(says(queued, "queued"));
  queued.signal(SIGKILL);
  ASSERT_TRUE(queued.wait(30s));
  const auto owner_deaths = [&] {
    for (const auto& each : client->sync_objects()) {
      if (each.name == "gpu.turn") return each.owner_deaths;
    }
    return 0u;
  };
  ASSERT_TRUE(daemon->wait_for([&] { return owner_deaths() == 1; }, 5s))
      << "the daemon took no turn of the dead process to pass on";

  daemon->restart(SIGKILL);

  opener.arrive(stream);  // the holder's stream goes on and releases: the dead turn comes
  lock.lock(stream);      // behind it
  lock.unlock(stream);
  EXPECT_TRUE(idle_within(5s)) << "the new daemon did not pass on the dead process's turn";
  EXPECT_TRUE(stream_idle(held));
  destroy_stream(held);
}

}  // namespace
}  // namespace gpumem::testing
