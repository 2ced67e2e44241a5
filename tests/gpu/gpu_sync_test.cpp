// Stream-ordered and device locks, barriers and channels across real processes on a GPU.
// Every test skips, with the reason, where no CUDA device is usable.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "gpumem/gpumem.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "sync_kernels.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

class GpuSync : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto why = why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
    daemon = std::make_unique<daemon_process>();
    client.emplace(daemon->connect("gpu-sync-test"));
    ASSERT_TRUE(client->stats().cuda) << "the daemon found no CUDA device";
    stream = make_stream();
  }
  void TearDown() override {
    if (stream != nullptr) destroy_stream(stream);
  }

  child_process peer(const std::vector<std::string>& args) const {
    std::vector<std::string> argv{GPUMEM_TEST_GPU_SYNC_PEER};
    argv.insert(argv.end(), args.begin(), args.end());
    return child_process(argv, {daemon->socket_env()});
  }
  static void expect_line(child_process& process, const std::string& prefix) {
    const auto line = process.read_line(120s);
    ASSERT_TRUE(line.has_value()) << "expected '" << prefix << "', got nothing";
    EXPECT_TRUE(line->starts_with(prefix)) << "expected '" << prefix << "', got '" << *line << "'";
  }
  /// A producer and two consumer peers pass items through channel @p name of @p shape (the
  /// peer's ITEMS CONSUMERS SLOTS BYTES [BATCH]); each consumer must say @p verdict.
  void pass_through_channel(const std::string& name, const std::vector<std::string>& shape,
                            const std::string& verdict) const {
    auto with = [&](const char* command) {
      std::vector<std::string> args{command, name};
      args.insert(args.end(), shape.begin(), shape.end());
      return peer(args);
    };
    auto producer = with("stream-channel-produce");
    auto first = with("stream-channel-consume");
    auto second = with("stream-channel-consume");
    expect_line(producer, "done");
    expect_line(first, verdict);
    expect_line(second, verdict);
  }
  /// A zeroed named device buffer.
  Buffer zeroed(const std::string& name, std::size_t size) {
    auto buffer = client->allocate(size, {.device = 0, .name = name, .stream = stream});
    zero_on_device(buffer.data(), size, stream);
    synchronize(stream);
    return buffer;
  }
  template <class T>
  T read(const Buffer& buffer) {
    T value{};
    copy_to_host(&value, buffer.data(), sizeof value, stream);
    return value;
  }
  bool idle_within(std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (!stream_idle(stream)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }

  std::unique_ptr<daemon_process> daemon;
  std::optional<gpumem::Client> client;
  stream_t stream = nullptr;
};

TEST_F(GpuSync, StreamOrderedLockCountsExactlyAcrossProcesses) {
  auto counter = zeroed("counter", sizeof(std::uint64_t));
  constexpr int kProcesses = 3;
  constexpr int kIterations = 300;
  std::vector<child_process> workers;
  for (int i = 0; i < kProcesses; ++i) {
    workers.push_back(
        peer({"stream-lock-count", "gpu.counter", "counter", std::to_string(kIterations)}));
  }
  for (auto& worker : workers) expect_line(worker, "done");
  EXPECT_EQ(read<std::uint64_t>(counter), std::uint64_t{kProcesses} * kIterations);
}

TEST_F(GpuSync, StreamOrderedLockPassesOnWhenAQueuedHolderDies) {
  auto ahead = peer({"stream-lock-queue", "gpu.robust"});
  expect_line(ahead, "queued");
  // Queued behind a holder that never unlocks: its stream waits, its host does not.
  auto behind = peer({"stream-lock-count", "gpu.robust", "-", "1"});
  EXPECT_FALSE(behind.read_line(300ms).has_value())
      << "the stream ran while another process held the lock";
  ahead.signal(SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  expect_line(behind, "done");
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 2s);
  EXPECT_EQ(client->sync_objects().at(0).owner_deaths, 1u);
}

TEST_F(GpuSync, DeviceLockCountsExactlyFromManyBlocks) {
  auto lock = client->lock("gpu.device");
  auto counter = zeroed("counter", sizeof(std::uint64_t));
  count_under_device_lock(lock.device(0), static_cast<std::uint64_t*>(counter.data()), 64, 128, 4,
                          stream);
  synchronize(stream);
  EXPECT_EQ(read<std::uint64_t>(counter), 64u * 128u * 4u);
}

TEST_F(GpuSync, DeviceLockCountsExactlyAcrossTwoProcesses) {
  // Both kernels run at once only under MPS; without it the GPU time-slices them and the
  // count is still exact, only slower. Kept small for that case.
  auto counter = zeroed("counter", sizeof(std::uint64_t));
  auto first = peer({"device-lock-count", "gpu.shared", "counter", "8", "64", "2"});
  auto second = peer({"device-lock-count", "gpu.shared", "counter", "8", "64", "2"});
  expect_line(first, "done");
  expect_line(second, "done");
  EXPECT_EQ(read<std::uint64_t>(counter), 2u * 8u * 64u * 2u);
}

TEST_F(GpuSync, ADeviceLockHeldByADeadProcessIsReleasedWithOwnerDied) {
  if (client->stats().mps) {
    GTEST_SKIP() << "under MPS, killing a process while its kernel runs faults the shared MPS "
                    "server and every client with it (README, 'Kernels and MPS')";
  }
  auto lock = client->lock("gpu.held");
  auto holder = peer({"device-lock-hold", "gpu.held"});
  expect_line(holder, "held");
  auto result = zeroed("result", sizeof(unsigned));
  probe_device_lock(lock.device(0), 1'000'000, static_cast<unsigned*>(result.data()), stream);
  synchronize(stream);
  EXPECT_EQ(read<unsigned>(result), 0u) << "taken while another process held it";
  holder.signal(SIGKILL);
  ASSERT_TRUE(holder.wait());
  probe_device_lock(lock.device(0), 2'000'000'000ull, static_cast<unsigned*>(result.data()),
                    stream);
  synchronize(stream);
  EXPECT_EQ(read<unsigned>(result), 2u) << "expected: taken, and told the owner died";
}

TEST_F(GpuSync, StreamOrderedBarrierRoundsAcrossProcesses) {
  const auto progress = zeroed("progress", 4096);
  std::vector<child_process> parties;
  for (int i = 0; i < 3; ++i) {
    parties.push_back(peer({"stream-barrier-rounds", "gpu.rounds", "3", "200", "progress"}));
  }
  for (auto& party : parties) expect_line(party, "ok");
}

TEST_F(GpuSync, AStreamWaitingOnADeadPartyIsReleasedAndTheBarrierBroken) {
  auto barrier = client->barrier("gpu.broken", 2);
  auto doomed = peer({"barrier-join", "gpu.broken", "2"});
  expect_line(doomed, "ready");
  barrier.wait(barrier.arrive(stream), stream);
  EXPECT_FALSE(idle_within(100ms)) << "the stream passed a barrier a party never reached";
  doomed.signal(SIGKILL);
  EXPECT_TRUE(idle_within(2000ms)) << "a stream waits on a dead party";
  EXPECT_TRUE(barrier.broken());
}

TEST_F(GpuSync, StreamOrderedChannelDeliversEveryItemToEveryConsumer) {
  pass_through_channel("gpu.frames", {"500", "2", "4", "65536"}, "ok 500");
}

TEST_F(GpuSync, StreamOrderedChannelDeliversBatchesOfItemsToEveryConsumer) {
  // 501 items, 3 at a time through 8 slots: batches wrap the ring, the last one is short.
  pass_through_channel("gpu.batches", {"501", "2", "8", "65536", "3"}, "ok 501");
}

}  // namespace
}  // namespace gpumem::testing
