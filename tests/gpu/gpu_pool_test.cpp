// CUDA pools across real processes: a real gpumemd, real CUDA clients, real signals.
// Every test skips, with the reason, where no CUDA device is usable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"
#include "gpumem/slab.hpp"
#include "kernels.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/metric_value.hpp"
#include "support/temporary_file.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

// MPS runs when its control pipe exists (the default folder or CUDA_MPS_PIPE_DIRECTORY's).
bool mps_active() {
  const char* folder = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  return std::filesystem::exists(std::string(folder != nullptr ? folder : "/tmp/nvidia-mps") +
                                 "/control");
}

class GpuPool : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto why = why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
    daemon = std::make_unique<daemon_process>();
    client.emplace(daemon->connect("gpu-test"));
    ASSERT_TRUE(client->stats().cuda) << "the daemon found no CUDA device";
    stream = make_stream();
  }
  void TearDown() override {
    if (stream != nullptr) destroy_stream(stream);
  }

  child_process peer(const std::vector<std::string>& args) const {
    std::vector<std::string> argv{GPUMEM_TEST_GPU_PEER};
    argv.insert(argv.end(), args.begin(), args.end());
    return child_process(argv, {daemon->socket_env()});
  }
  static std::uint64_t ready(child_process& process) {
    const auto line = process.read_line(30s);
    EXPECT_TRUE(line && line->starts_with("ready ")) << (line ? *line : "(no line)");
    return line && line->starts_with("ready ") ? std::stoull(line->substr(6)) : 0;
  }
  PoolStats cuda_pool() {
    for (const auto& pool : client->stats().pools) {
      if (pool.device == 0) return pool;
    }
    ADD_FAILURE() << "no pool on device 0";
    return {};
  }
  bool wait_for_cuda_bytes(std::uint64_t expected, std::chrono::milliseconds within) {
    return eventually([&] { return cuda_pool().bytes_in_use == expected; }, within);
  }

  std::unique_ptr<daemon_process> daemon;
  std::optional<gpumem::Client> client;
  stream_t stream = nullptr;
};

TEST_F(GpuPool, AProducerKernelsBytesReachConsumerProcessesFrom4KiBTo1GiB) {
  for (const std::size_t size :
       {std::size_t{4} << 10, std::size_t{1} << 20, std::size_t{64} << 20, std::size_t{1} << 30}) {
    const std::string name = "frames-" + std::to_string(size);
    auto producer = peer({"produce", name, std::to_string(size), "11"});
    ready(producer);
    for (int consumer = 0; consumer < 2; ++consumer) {
      auto reader = peer({"consume", name, std::to_string(size), "11"});
      EXPECT_EQ(reader.read_line(60s), "ok") << size << " bytes, consumer " << consumer;
      EXPECT_EQ(exit_code(*reader.wait(30s)), 0);
    }
    producer.signal(SIGTERM);
    EXPECT_EQ(producer.read_line(30s), "released");
    EXPECT_EQ(exit_code(*producer.wait(30s)), 0);
  }
  EXPECT_TRUE(wait_for_cuda_bytes(0, 1s));
}

TEST_F(GpuPool, StreamOrderedReuseOfFreedMemoryNeverShowsStaleBytes) {
  auto churn = peer({"churn", std::to_string(std::size_t{8} << 20), "200"});
  EXPECT_EQ(churn.read_line(120s), "ok");
  EXPECT_EQ(exit_code(*churn.wait(30s)), 0);
  // The same in this process, with two holders of each buffer on different streams.
  stream_t other = make_stream();
  for (std::uint32_t round = 0; round < 50; ++round) {
    auto buffer = client->allocate(1 << 20, {.device = 0, .name = "reuse", .stream = stream});
    fill_on_device(buffer.data(), buffer.size(), round + 100, stream);
    synchronize(stream);
    auto again = client->open("reuse", {.stream = other});
    EXPECT_EQ(again.data(), buffer.data()) << "an opened buffer is imported once per process";
    EXPECT_EQ(mismatches_on_device(again.data(), again.size(), round + 100, other), 0u);
  }
  destroy_stream(other);
  EXPECT_TRUE(wait_for_cuda_bytes(0, 1s));
}

// cuda_share_bench's rounds, in which the pool was handed a new block almost every time on an
// H200 with MPS off (0.6-1 GiB in 1,000 rounds) until released blocks went to the allocation
// stream (released_blocks.hpp): each allocation is released before the next, so a few blocks
// serve them all.
TEST_F(GpuPool, AllocationsReleasedInTurnReuseAFewBlocksRatherThanGrowThePool) {
  constexpr std::size_t kMiB = 1 << 20;
  auto named = client->allocate(kMiB, {.device = 0, .name = "kept", .stream = stream});
  std::set<void*> blocks;
  for (int round = 0; round < 300; ++round) {
    device_free(device_malloc(kMiB));
    auto first = client->allocate(kMiB, {.device = 0, .stream = stream});
    blocks.insert(first.data());
    first.release();
    client->open("kept", {.stream = stream}).release();
    client->ping();
    auto second = client->allocate(kMiB, {.device = 0, .stream = stream});
    blocks.insert(second.data());
    second.release();
  }
  EXPECT_LE(blocks.size(), 8u) << "600 allocations of 1 MiB, each released before the next";
  named.release();
  EXPECT_TRUE(wait_for_cuda_bytes(0, 1s));
}

// A released block is reused only once its holder's work on it is done: the holder's fills are
// still running when it releases the block and the next allocations come. Blocks of 128 MiB are
// larger than any spare, so each allocation is made from the pool as it comes, and would be given
// the released block at once if it were freed too early; blocks of 32 MiB are served by spares,
// and a released one, taken back as a spare too early, would be the next one handed out (the
// spares hand out the block they took last), to the second allocation if not the first.
TEST_F(GpuPool, AReleasedBlockIsNotReusedWhileItsHoldersWorkOnItStillRuns) {
  stream_t other = make_stream();
  for (const auto& [size, passes] :
       {std::pair{std::size_t{128} << 20, 40}, std::pair{std::size_t{32} << 20, 160}}) {
    for (std::uint32_t round = 0; round < 20; ++round) {
      auto held = client->allocate(size, {.device = 0, .stream = stream});
      for (int pass = 0; pass < passes; ++pass) {
        fill_on_device(held.data(), size, round + 1, stream);
      }
      held.release();  // in stream order, behind the fills
      auto next = client->allocate(size, {.device = 0, .stream = other});
      auto after = client->allocate(size, {.device = 0, .stream = other});
      fill_on_device(next.data(), size, round + 100, other);
      fill_on_device(after.data(), size, round + 200, other);
      synchronize(stream);
      synchronize(other);
      EXPECT_EQ(mismatches_on_device(next.data(), size, round + 100, other), 0u)
          << (size >> 20) << " MiB, round " << round;
      EXPECT_EQ(mismatches_on_device(after.data(), size, round + 200, other), 0u)
          << (size >> 20) << " MiB, round " << round << ", the second allocation";
      next.release();
      after.release();
    }
  }
  synchronize(other);
  destroy_stream(other);
  EXPECT_TRUE(wait_for_cuda_bytes(0, 1s));
}

// A program that frees a buffer and asks for one of the same size at every step: the released
// block, once its holder is done with it, becomes a spare again (cuda_spares.hpp) and serves a
// later allocation, so the spares' worker makes (and exports) nothing after the first rounds.
// Each holder sees the bytes it wrote.
TEST_F(GpuPool, ABlockReleasedAndDoneWithIsHandedOutAgainWithNothingMade) {
  constexpr std::size_t kSize = std::size_t{2} << 20;
  const std::string labels = "pool=\"cuda0\",device=\"cuda0\"";
  const auto metric = [&](const std::string& sample) {
    return metric_value(client->metrics(), "gpumemd_" + sample);
  };
  const auto made = [&] { return metric("pool_spare_blocks_total{" + labels + ",how=\"made\"}"); };
  const auto reused = [&] {
    return metric("pool_spare_blocks_total{" + labels + ",how=\"reused\"}");
  };
  for (int warm = 0; warm < 3; ++warm) client->allocate(kSize, {.device = 0, .stream = stream});
  synchronize(stream);
  const double made_before = made();
  const double reused_before = reused();
  const double on_request_before =
      metric("pool_cuda_allocations_total{" + labels + ",from=\"request\"}");
  constexpr int kRounds = 50;
  for (std::uint32_t round = 0; round < kRounds; ++round) {
    auto buffer = client->allocate(kSize, {.device = 0, .stream = stream});
    fill_on_device(buffer.data(), kSize, round + 1, stream);
    EXPECT_EQ(mismatches_on_device(buffer.data(), kSize, round + 1, stream), 0u)
        << "round " << round;
    buffer.release();
    synchronize(stream);  // the holder is done with it before the next allocation
    // The rest of a step. The daemon learns that the holder is done from a mark its release
    // stream records behind the holder's event; with MPS off that waits for the GPU to turn to
    // the daemon's context: on an H200 the marks were still pending 70-125 us after the release
    // in this loop without the pause, and were seen landed 0.4-1.7 ms after it.
    std::this_thread::sleep_for(5ms);
  }
  // A block whose mark had not landed when the next reply went out leaves a block to make.
  EXPECT_GE(reused() - reused_before, kRounds * 0.8) << "blocks taken back as spares";
  EXPECT_LE(made() - made_before, kRounds * 0.2) << "blocks the worker made meanwhile";
  EXPECT_EQ(metric("pool_cuda_allocations_total{" + labels + ",from=\"request\"}"),
            on_request_before)
      << "every allocation found a block ready";
  EXPECT_TRUE(wait_for_cuda_bytes(0, 1s));
}

// The daemon opens a client's release event once (memory/holder_events.hpp) and keeps it for
// the client's later releases while its connection lasts, never one per release; the releases
// it serves still wait for the holder's work (AReleasedBlockIsNotReused... above).
// That the event is opened once, not again on each release, is HolderEvents' on the fake driver
// (it counts the openings); here the daemon keeps one event for the client's ten releases.
TEST_F(GpuPool, AClientsReleasesKeepOneEventOpenUntilItsConnectionEnds) {
  const std::uint32_t before = client->stats().ipc_events_live;
  {
    Client releasing = daemon->connect("releasing");
    for (std::uint32_t round = 0; round < 10; ++round) {
      auto buffer = releasing.allocate(1 << 20, {.device = 0, .stream = stream});
      fill_on_device(buffer.data(), buffer.size(), round + 1, stream);
      buffer.release();
    }
    EXPECT_EQ(client->stats().ipc_events_live, before + 1) << "one for ten releases";
    synchronize(stream);
  }
  EXPECT_TRUE(eventually([&] { return client->stats().ipc_events_live == before; }))
      << "let go once the connection ended: " << client->stats().ipc_events_live << " against "
      << before;
  EXPECT_TRUE(wait_for_cuda_bytes(0, 1s));
}

TEST_F(GpuPool, AClientKilledAfterAReleaseLeavesItsKeptEventToGoAndTheDaemonServing) {
  // The daemon destroys its opening of the client's event after the client's process, which
  // made the event, is gone: the driver must take that as it takes a normal exit's.
  auto shared = client->allocate(1 << 20, {.device = 0, .name = "shared", .stream = stream});
  fill_on_device(shared.data(), shared.size(), 5, stream);
  synchronize(stream);
  const std::uint32_t before = client->stats().ipc_events_live;
  auto holder = peer({"release-and-stay", "shared"});
  ASSERT_EQ(holder.read_line(30s), "released");
  EXPECT_EQ(client->stats().ipc_events_live, before + 1) << "the holder's event, kept";
  holder.signal(SIGKILL);
  holder.wait();
  EXPECT_TRUE(eventually([&] { return client->stats().ipc_events_live == before; }))
      << "let go with the killed client: " << client->stats().ipc_events_live << " against "
      << before;
  auto next = client->allocate(1 << 20, {.device = 0, .stream = stream});
  fill_on_device(next.data(), next.size(), 6, stream);
  EXPECT_EQ(mismatches_on_device(next.data(), next.size(), 6, stream), 0u);
  EXPECT_EQ(mismatches_on_device(shared.data(), shared.size(), 9, stream), 0u)
      << "the holder's fill, done before its release was";
  next.release();
  shared.release();
  EXPECT_TRUE(wait_for_cuda_bytes(0, 1s));
}

TEST_F(GpuPool, AnAnonymousBufferIsUsableInStreamOrderWithoutHostSync) {
  auto buffer = client->allocate(32 << 20, {.device = 0, .stream = stream});
  fill_on_device(buffer.data(), buffer.size(), 5, stream);  // no synchronisation before
  EXPECT_EQ(mismatches_on_device(buffer.data(), buffer.size(), 5, stream), 0u);
  EXPECT_EQ(cuda_pool().bytes_in_use, 32u << 20);
  EXPECT_GE(cuda_pool().driver_used_current, 32u << 20) << "driver counters beside the books";
  buffer.release();
  EXPECT_TRUE(wait_for_cuda_bytes(0, 1s));
}

TEST_F(GpuPool, TheOwnersDeathLeavesTheBufferToItsHolder) {
  auto owner = peer({"produce", "orphan", std::to_string(16 << 20), "21"});
  ready(owner);
  auto held = client->open("orphan", {.stream = stream});
  owner.signal(SIGKILL);
  owner.wait();
  ASSERT_TRUE(eventually([&] { return client->allocations().at(0).owner_client == 0; }, 1s));
  EXPECT_EQ(mismatches_on_device(held.data(), held.size(), 21, stream), 0u);
  EXPECT_EQ(cuda_pool().bytes_in_use, 16u << 20);
  held.release();
  EXPECT_TRUE(wait_for_cuda_bytes(0, 1s));
}

TEST_F(GpuPool, AKilledHoldersShareIsReleasedWithoutItsEvent) {
  auto owner = peer({"produce", "shared", std::to_string(8 << 20), "3"});
  ready(owner);
  auto holder = peer({"hold", "shared"});
  ready(holder);
  holder.signal(SIGKILL);
  holder.wait();
  owner.signal(SIGTERM);
  EXPECT_EQ(owner.read_line(30s), "released");
  EXPECT_TRUE(wait_for_cuda_bytes(0, 1s));
}

TEST_F(GpuPool, MemoryAlreadyImportedOutlivesAKilledDaemon) {
  auto buffer = client->allocate(64 << 20, {.device = 0, .stream = stream});
  fill_on_device(buffer.data(), buffer.size(), 77, stream);
  synchronize(stream);
  ::kill(daemon->pid(), SIGKILL);
  EXPECT_EQ(daemon->stop(), 128 + SIGKILL);
  EXPECT_EQ(mismatches_on_device(buffer.data(), buffer.size(), 77, stream), 0u);
  fill_on_device(buffer.data(), buffer.size(), 78, stream);
  EXPECT_EQ(mismatches_on_device(buffer.data(), buffer.size(), 78, stream), 0u);
  EXPECT_THROW(buffer.release(), gpumem::Error) << "the daemon is gone: release says so";
}

TEST_F(GpuPool, SlabPiecesWorkInKernelsAndReachAnotherProcess) {
  auto slab = Slab::lease(*client, 64 << 20, {.device = 0, .name = "gpu-slab", .stream = stream});
  std::vector<SlabPiece> pieces;
  for (std::uint32_t i = 0; i < 16; ++i) {
    pieces.push_back(slab.allocate((i + 1) * 100000));
    fill_on_device(slab.data(pieces.back()), pieces.back().size, i, stream);
  }
  synchronize(stream);
  for (std::uint32_t i = 0; i < 16; i += 5) {
    auto reader =
        peer({"consume-piece", "gpu-slab", std::to_string(pieces[i].slab),
              std::to_string(pieces[i].offset), std::to_string(pieces[i].size), std::to_string(i)});
    EXPECT_EQ(reader.read_line(30s), "ok") << "piece " << i;
  }
  for (const auto& piece : pieces) slab.free(piece);
  EXPECT_EQ(client->stats().allocations, 1u) << "pieces never reach the daemon";
}

TEST_F(GpuPool, AReservationGrowsAndShrinksInPlaceWhileAnotherHolderReadsIt) {
  constexpr std::size_t kMiB = 1 << 20;
  auto owner =
      Reservation::create(*client, 64 * kMiB, {.device = 0, .name = "grow", .initial = kMiB});
  ASSERT_EQ(owner.chunk_size(), 2 * kMiB) << "H100 granularity";
  EXPECT_EQ(owner.size(), 2 * kMiB) << "rounded up to a whole chunk";
  fill_on_device(owner.data(), owner.size(), 1, stream);
  synchronize(stream);
  auto other_client = daemon->connect("reader");
  auto reader = Reservation::open(other_client, "grow");
  void* const base = reader.data();
  EXPECT_EQ(mismatches_on_device(reader.data(), 2 * kMiB, 1, stream), 0u);

  owner.resize(8 * kMiB);
  fill_on_device(owner.data(), 8 * kMiB, 2, stream);
  synchronize(stream);
  EXPECT_EQ(reader.refresh(), 8 * kMiB);
  EXPECT_EQ(reader.data(), base) << "growth never moves the range";
  ASSERT_EQ(client->reservations().size(), 1u);
  EXPECT_EQ(client->reservations().at(0).committed, 8 * kMiB);
  EXPECT_EQ(client->reservations().at(0).holders, 2u);
  EXPECT_EQ(mismatches_on_device(reader.data(), 8 * kMiB, 2, stream), 0u);
  auto other_process = peer({"reservation-verify", "grow", std::to_string(8 * kMiB), "2"});
  EXPECT_EQ(other_process.read_line(30s), "ok");

  owner.resize(4 * kMiB);  // decommit the tail; nobody uses it now
  EXPECT_EQ(reader.refresh(), 4 * kMiB);
  EXPECT_EQ(mismatches_on_device(reader.data(), 4 * kMiB, 2, stream), 0u) << "the head stays";
  EXPECT_THROW(reader.resize(16 * kMiB), gpumem::Error) << "only the owner resizes";
}

TEST_F(GpuPool, AReadOnlyReservationHolderCannotWrite) {
  auto owner =
      Reservation::create(*client, 4 << 20, {.device = 0, .name = "ro", .initial = 2 << 20});
  auto writer = peer({"reservation-write", "ro"});
  const auto line = writer.read_line(30s);
  ASSERT_TRUE(line);
  EXPECT_TRUE(line->starts_with("refused ")) << *line;
  // Under MPS a fatal fault in one client is reported to every client of the server (seen on
  // an H100: this process's next launch fails too), so only without MPS does the owner go on.
  if (mps_active()) return;
  fill_on_device(owner.data(), owner.size(), 3, stream);
  EXPECT_EQ(mismatches_on_device(owner.data(), owner.size(), 3, stream), 0u)
      << "the owner's read-write mapping still works";
}

TEST_F(GpuPool, AKilledReservationHoldersMemoryReturnsToTheDevice) {
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  const std::size_t before = device_free_memory();
  auto holder = peer({"reservation-hold", "held", std::to_string(kBytes)});
  ready(holder);
  EXPECT_LT(device_free_memory() + kBytes / 2, before) << "a gigabyte is committed";
  holder.signal(SIGKILL);
  holder.wait();
  ASSERT_TRUE(eventually([&] { return device_free_memory() + kBytes / 2 >= before; }, 2s, 10ms))
      << "the chunks were never released";
}

TEST(GpuPeers, APoolOnOneDeviceIsReadByAProcessOnAnotherThroughPeerAccess) {
  if (device_count() < 2) GTEST_SKIP() << "needs two CUDA devices; " << device_count() << " here";
  const std::string config =
      ::testing::TempDir() + "gpumemd-peers-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(config) << "pools:\n  - {name: gpu0, device: 0, size: 4GiB, peer_access: [1]}\n";
  daemon_process daemon({"--config", config});
  const auto run = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv{GPUMEM_TEST_GPU_PEER};
    argv.insert(argv.end(), args.begin(), args.end());
    return child_process(argv, {daemon.socket_env()});
  };
  auto producer = run({"produce", "across", std::to_string(256 << 20), "42"});
  const auto line = producer.read_line(30s);
  ASSERT_TRUE(line && line->starts_with("ready")) << (line ? *line : "(none)");
  auto consumer = run({"consume-on", "1", "across", std::to_string(256 << 20), "42"});
  EXPECT_EQ(consumer.read_line(60s), "ok");
  producer.signal(SIGTERM);
  EXPECT_EQ(producer.read_line(30s), "released");
  ::unlink(config.c_str());
}

// Tenants never share a CUDA pool (pointer export data can be forged): another uid's buffer
// lives in a pool instance of its own, which an administrator may import and a third uid may
// not reach. Other uids run the peer through setpriv, so no process forks after CUDA started.
TEST(GpuTenants, EachUidsCudaMemoryIsInAPoolOfItsOwn) {
  if (const auto why = why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run peers as other uids";
  if (mps_active()) {
    GTEST_SKIP() << "MPS serves the clients of one uid at a time: a second uid's CUDA client "
                    "waits until the first uid's are gone";
  }
  const std::string config =
      ::testing::TempDir() + "gpumemd-tenants-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(config) << "socket_mode: \"0666\"\naccess: {connect_users: [65534, 65533]}\n";
  daemon_process daemon({"--config", config});
  ::chmod(daemon.folder().c_str(), 0755);
  const auto as_uid = [&](std::uint32_t uid, const std::vector<std::string>& args) {
    const std::string id = std::to_string(uid);
    std::vector<std::string> argv{"/usr/bin/setpriv", "--reuid=" + id, "--regid=" + id,
                                  "--clear-groups", GPUMEM_TEST_GPU_PEER};
    argv.insert(argv.end(), args.begin(), args.end());
    return child_process(argv, {daemon.socket_env()});
  };
  auto root = daemon.connect("gpu-tenants");
  stream_t stream = make_stream();
  auto own = root.allocate(1 << 20, {.device = 0, .name = "roots", .stream = stream});

  auto producer = as_uid(65534, {"produce", "nobodys", std::to_string(1 << 20), "31"});
  const auto line = producer.read_line(60s);
  ASSERT_TRUE(line && line->starts_with("ready")) << (line ? *line : "(none)");
  std::uint32_t roots_pool = 0, nobodys_pool = 0;
  for (const auto& each : root.allocations()) {
    (each.name == "roots" ? roots_pool : nobodys_pool) = each.pool;
  }
  EXPECT_NE(roots_pool, nobodys_pool) << "two uids' CUDA buffers in one pool";

  auto held = root.open("nobodys", {.access = gpumem::Access::read_only, .stream = stream});
  EXPECT_EQ(mismatches_on_device(held.data(), held.size(), 31, stream), 0u)
      << "an administrator imports the other uid's pool and reads its bytes";
  auto stranger = as_uid(65533, {"consume", "nobodys", std::to_string(1 << 20), "31"});
  const auto refusal = stranger.read_line(60s);
  ASSERT_TRUE(refusal) << "no answer from the third uid's peer";
  EXPECT_TRUE(refusal->starts_with("error ") && refusal->find("may not open") != std::string::npos)
      << *refusal;
  std::uint64_t in_use = 0;
  for (const auto& pool : root.stats().pools) {
    if (pool.device == 0) in_use = pool.bytes_in_use;
  }
  EXPECT_EQ(in_use, 2u << 20) << "a configured pool's line is the sum of its instances";
  held.release();
  own.release();  // both were used on the stream: it goes after them
  producer.signal(SIGTERM);
  EXPECT_EQ(producer.read_line(30s), "released");
  destroy_stream(stream);
  ::unlink(config.c_str());
}

TEST_F(GpuPool, BadRequestsAreClearErrorsAndOthersCarryOn) {
  auto kept = client->allocate(1 << 20, {.device = 0, .name = "kept", .stream = stream});
  const auto expect_error = [](gpumem::errc code, const std::function<void()>& work) {
    try {
      work();
      ADD_FAILURE() << "no error";
    } catch (const gpumem::Error& error) {
      EXPECT_EQ(error.status(), code) << error.what();
    }
  };
  expect_error(gpumem::errc::out_of_memory,
               [&] { client->allocate(std::size_t{1} << 50, {.device = 0, .stream = stream}); });
  expect_error(gpumem::errc::no_such_device, [&] { client->allocate(1, {.device = 63}); });
  expect_error(gpumem::errc::already_exists,
               [&] { client->allocate(1, {.device = 0, .name = "kept"}); });
  auto reader = peer({"consume", "kept", std::to_string(1 << 20), "0"});
  reader.read_line(30s);
  EXPECT_EQ(cuda_pool().bytes_in_use, 1u << 20);
}

// Each access class has an instance (a CUDA pool) of its own, whose driver limit is the whole
// configured size; spare blocks are made only where they fit beside all instances' allocations
// and spares. Modes 0600 and 0640 of one uid are two classes.
TEST(GpuSpares, EveryInstancesSpareBlocksAreMadeOnlyInThePoolsSizeAndServeTheirOwnTenant) {
  if (const auto why = why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
  constexpr std::uint64_t kMiB = 1 << 20;
  const temporary_file config("gpu-spares",
                              "pools:\n  - name: small\n    device: 0\n    size: 16MiB\n");
  daemon_process daemon({"--config", config.path()});
  gpumem::Client client = daemon.connect("spares");
  const stream_t stream = make_stream();
  const auto allocate = [&](std::uint64_t size, unsigned mode) {
    return client.allocate(size, {.device = 0, .pool = "small", .stream = stream, .mode = mode});
  };
  const auto small = [&] {
    for (const auto& pool : client.stats().pools) {
      if (pool.name == "small") return pool;
    }
    ADD_FAILURE() << "no pool 'small'";
    return PoolStats{};
  };
  const auto metric = [&](const std::string& sample) {
    return metric_value(client.metrics(), sample);
  };
  const std::string labels = "pool=\"small\",device=\"cuda0\"";
  const std::string spare_bytes = "gpumemd_pool_spare_bytes{" + labels + "}";
  const std::string spare_ready = "gpumemd_pool_spare_ready_bytes{" + labels + "}";
  // The driver's count of what the instances hold, allocations and spares, once their frees ran.
  const auto device_bytes_become = [&](std::uint64_t bytes) {
    return eventually([&] { return small().driver_used_current == bytes; });
  };

  auto first = allocate(4 * kMiB, 0600);  // two 4 MiB spares follow, in the room left
  ASSERT_TRUE(device_bytes_become(12 * kMiB)) << small().driver_used_current;
  auto second = allocate(4 * kMiB, 0640);  // the other instance: no room left for its spares
  EXPECT_EQ(metric(spare_bytes), static_cast<double>(8 * kMiB));
  ASSERT_TRUE(device_bytes_become(16 * kMiB)) << small().driver_used_current;
  // The second instance wanted no spare: a wish counts in the spare bytes once the request that
  // makes it is answered, before the daemon reads the next (8 MiB above). Once the first instance's
  // blocks are filed (just after the driver counts them), none is being made either, so what the
  // driver holds is final.
  ASSERT_TRUE(eventually([&] { return metric(spare_ready) == static_cast<double>(8 * kMiB); }))
      << metric(spare_ready);
  EXPECT_EQ(metric(spare_bytes), metric(spare_ready)) << "nothing being made";
  EXPECT_EQ(small().driver_used_current, 16 * kMiB) << "the configured size, not more";

  auto third = allocate(4 * kMiB, 0600);  // served by the first instance's spares
  auto fourth = allocate(4 * kMiB, 0600);
  EXPECT_EQ(metric(spare_bytes), 0);
  EXPECT_EQ(metric("gpumemd_pool_cuda_allocations_total{" + labels + ",from=\"spare\"}"), 2);
  EXPECT_EQ(metric("gpumemd_pool_cuda_allocations_total{" + labels + ",from=\"request\"}"), 2);
  EXPECT_EQ(small().bytes_in_use, 16 * kMiB);
  EXPECT_EQ(small().driver_used_current, 16 * kMiB) << "no spare made once the size is full";
  for (Buffer* each : {&first, &second, &third, &fourth}) each->release();
  destroy_stream(stream);
}

}  // namespace
}  // namespace gpumem::testing
