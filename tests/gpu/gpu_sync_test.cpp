// Stream-ordered and device locks, barriers and channels across real processes on a GPU.
// Every test skips, with the reason, where no CUDA device is usable.
#include <gtest/gtest.h>
#include <signal.h>

#include <array>
#include <future>
#include <optional>
#include <thread>

#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
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
  /// The other party of barrier @p name of two, a peer process that joined it: the one a test
  /// SIGKILLs. A test checks HasFatalFailure() after it: a peer that never joined would leave
  /// the test's own wait on the barrier hanging.
  child_process doomed_party(const std::string& name) const {
    auto doomed = peer({"barrier-join", name, "2"});
    expect_line(doomed, "ready");
    return doomed;
  }
  /// A producer and two consumer peers pass items through channel @p name of @p shape (the
  /// peer's ITEMS 2 SLOTS BYTES [BATCH]); each consumer must say @p verdict. The peers use the
  /// forms named: "stream" (stream-ordered calls) or "device" (in a kernel).
  void pass_through_channel(const std::string& name, const std::vector<std::string>& shape,
                            const std::string& verdict, const std::string& producer_form = "stream",
                            const std::array<std::string, 2>& consumer_forms = {"stream",
                                                                                "stream"}) const {
    auto with = [&](const std::string& form, const char* role) {
      std::vector<std::string> args{form + "-channel-" + role, name};
      args.insert(args.end(), shape.begin(), shape.end());
      return peer(args);
    };
    auto producer = with(producer_form, "produce");
    auto first = with(consumer_forms[0], "consume");
    auto second = with(consumer_forms[1], "consume");
    expect_line(producer, "done");
    expect_line(first, verdict);
    expect_line(second, verdict);
  }
  /// Parties of barrier @p name, one per form named ("stream" or "device"), take @p rounds
  /// rounds, each checking on the GPU that every party reached each round; each must say "ok".
  void take_barrier_rounds(const std::string& name, const std::vector<std::string>& forms,
                           int rounds) {
    const auto progress = zeroed("progress", 4096);
    std::vector<child_process> parties;
    for (const auto& form : forms) {
      parties.push_back(peer({form + "-barrier-rounds", name, std::to_string(forms.size()),
                              std::to_string(rounds), "progress"}));
    }
    for (auto& party : parties) expect_line(party, "ok");
  }
  /// The two words a kernel of sync_kernels.hpp reports: what it passed, whether it broke.
  std::array<unsigned, 2> outcome_of(const Buffer& outcome) {
    std::array<unsigned, 2> words{};
    copy_to_host(words.data(), outcome.data(), sizeof words, stream);
    return words;
  }
  /// A stream-ordered lock taken on stream `held`, which then stops at a gate before it
  /// unlocks; open() lets it go on (from stream `other`, free for the test's own work too).
  struct gated_holder {
    explicit gated_holder(Client& client)
        : lock(client.lock("gpu.stalled")),
          gate(client.barrier("gpu.gate", 2)),
          opener(client.barrier("gpu.gate", 2)) {}
    gated_holder(const gated_holder&) = delete;
    gated_holder& operator=(const gated_holder&) = delete;
    ~gated_holder() {
      destroy_stream(other);
      destroy_stream(held);
    }
    void open() { opener.arrive(other); }

    Lock lock;
    Barrier gate;
    Barrier opener;
    stream_t held = make_stream();
    stream_t other = make_stream();
  };
  /// Takes @p holder's lock behind its gate, then SIGKILLs a process queued behind it: the
  /// daemon's turn for the dead process waits until the gate opens.
  void hold_up_a_lock_turn(gated_holder& holder) {
    holder.lock.lock(holder.held);
    holder.gate.wait(holder.gate.arrive(holder.held), holder.held);
    holder.lock.unlock(holder.held);
    auto queued = peer({"stream-lock-queue", holder.lock.name()});
    expect_line(queued, "queued");
    queued.signal(SIGKILL);
    ASSERT_TRUE(eventually([&] { return client->sync_objects().at(0).owner_deaths == 1; }))
        << "the daemon passed on no turn for the dead process";
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
  bool idle_within(std::chrono::milliseconds bound) { return idle_within(stream, bound); }
  static bool idle_within(stream_t which, std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (!stream_idle(which)) {
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

// With the lock's queue full, lock(stream) waits for the oldest turn to pass, which here is
// the same Lock object's: its unlock(stream) on another thread must not wait for that lock().
// The rest of the queue is another process's, so that no stream of the process under test
// waits for a turn ahead of the release it must queue.
TEST_F(GpuSync, AStreamLockWaitingOnAFullQueueLetsTheSameObjectsUnlockThrough) {
  auto holder = peer({"stream-lock-relock", "gpu.full"});
  expect_line(holder, "held");
  auto rest =
      peer({"stream-lock-fill", "gpu.full", std::to_string(sync::kLockQueueLength - 1), "16"});
  expect_line(rest, "queued");
  holder.signal(SIGUSR1);
  const auto said = holder.read_line(30s);
  EXPECT_EQ(said, "done") << "lock(stream) on a full queue kept out the unlock that empties it";
  if (said != "done") holder.signal(SIGKILL);  // its turn then passes on, and the rest can run
  expect_line(rest, "done");
}

TEST_F(GpuSync, TheTurnsOfADeadProcessInTwoLocksPassOnInWhicheverOrderTheyCome) {
  // The dead process took the outer lock's turn and queued for the inner one behind this
  // process, whose stream nests them: it waits for the outer lock before it releases the inner.
  // So the dead turn in the inner lock comes only once the outer one's is passed on. The locks
  // are made in both orders, so that in one the daemon comes to the inner lock first.
  for (const bool inner_made_first : {false, true}) {
    SCOPED_TRACE(inner_made_first ? "inner lock made first" : "outer lock made first");
    const std::string tag = inner_made_first ? ".inner-first" : ".outer-first";
    const std::string outer_name = "gpu.outer" + tag;
    const std::string inner_name = "gpu.inner" + tag;
    std::optional<Lock> outer, inner;
    if (inner_made_first) inner.emplace(client->lock(inner_name));
    outer.emplace(client->lock(outer_name));
    if (!inner_made_first) inner.emplace(client->lock(inner_name));

    inner->lock(stream);
    auto dead = peer({"stream-lock-queue", outer_name, inner_name});
    expect_line(dead, "queued");
    outer->lock(stream);
    outer->unlock(stream);
    inner->unlock(stream);
    EXPECT_FALSE(idle_within(300ms)) << "this stream took the lock whose turn another process held";
    dead.signal(SIGKILL);
    EXPECT_TRUE(idle_within(2000ms))
        << "the dead process's turns in the two locks held each other up";

    outer->lock(stream);
    inner->lock(stream);
    inner->unlock(stream);
    outer->unlock(stream);
    EXPECT_TRUE(idle_within(2000ms)) << "the locks did not go on after the dead process's turns";
    for (const auto& each : client->sync_objects()) {
      if (each.name == outer_name || each.name == inner_name) {
        EXPECT_EQ(each.owner_deaths, 1u) << each.name;
      }
    }
  }
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
  take_barrier_rounds("gpu.rounds", {"stream", "stream", "stream"}, 200);
}

TEST_F(GpuSync, AStreamWaitingOnADeadPartyIsReleasedAndTheBarrierBroken) {
  auto barrier = client->barrier("gpu.broken", 2);
  auto doomed = doomed_party("gpu.broken");
  ASSERT_FALSE(HasFatalFailure()) << "the other party never joined";
  barrier.wait(barrier.arrive(stream), stream);
  EXPECT_FALSE(idle_within(100ms)) << "the stream passed a barrier a party never reached";
  doomed.signal(SIGKILL);
  EXPECT_TRUE(idle_within(2000ms)) << "a stream waits on a dead party";
  EXPECT_TRUE(barrier.broken());
}

TEST_F(GpuSync, ABarrierIsRepairedAndResetWhileALockTurnOfADeadProcessWaits) {
  // The repairs of a barrier on the same signal page as a held-up lock turn must not wait
  // with it.
  gated_holder holder(*client);
  hold_up_a_lock_turn(holder);

  auto barrier = client->barrier("gpu.behind", 2);
  auto doomed = doomed_party("gpu.behind");
  ASSERT_FALSE(HasFatalFailure()) << "the other party never joined";
  barrier.wait(barrier.arrive(stream), stream);
  doomed.signal(SIGKILL);
  EXPECT_TRUE(idle_within(2000ms)) << "a barrier's repair waited for another object's turn";

  // Reset while the turn still waits, then let the lock go on: nothing of the barrier's
  // repair may land after the reset.
  client->reset("gpu.behind", 2);
  holder.open();
  holder.lock.lock(holder.other);
  holder.lock.unlock(holder.other);
  EXPECT_TRUE(idle_within(holder.other, 2000ms)) << "the lock's turns did not pass on";
  auto second = client->barrier("gpu.behind", 2);
  barrier.wait(barrier.arrive(stream), stream);
  EXPECT_FALSE(idle_within(100ms)) << "after the reset a stream passed a round nobody reached";
  second.arrive(holder.other);
  EXPECT_TRUE(idle_within(2000ms)) << "the round after the reset never completed";
  EXPECT_FALSE(barrier.broken());
}

TEST_F(GpuSync, AReservationWakesWhileALockTurnOfADeadProcessWaits) {
  gated_holder holder(*client);
  hold_up_a_lock_turn(holder);
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  auto weights = Reservation::create(*client, kBytes, {.device = 0, .initial = kBytes});
  auto sleep_and_wake = std::async(std::launch::async, [&] {
    weights.sleep();
    weights.wake();
  });
  // The wake's copy back waited for the daemon's whole context, its turns included.
  EXPECT_EQ(sleep_and_wake.wait_for(10s), std::future_status::ready)
      << "a wake waited for a lock turn that another process holds up";
  holder.open();
  sleep_and_wake.get();
  EXPECT_EQ(weights.state(), ReservationState::awake);
  EXPECT_TRUE(idle_within(holder.held, 2000ms)) << "the held-up stream did not go on";
}

TEST_F(GpuSync, StreamOrderedChannelDeliversEveryItemToEveryConsumer) {
  pass_through_channel("gpu.frames", {"500", "2", "4", "65536"}, "ok 500");
}

TEST_F(GpuSync, StreamOrderedChannelDeliversBatchesOfItemsToEveryConsumer) {
  // 501 items, 3 at a time through 8 slots: batches wrap the ring, the last one is short.
  pass_through_channel("gpu.batches", {"501", "2", "8", "65536", "3"}, "ok 501");
}

// The in-kernel forms (gpumem/device.cuh) against each other and the stream forms: one domain
// shared by streams and kernels. Without MPS the GPU time-slices the processes' kernels, so
// each hand-off may take a slice; the shapes are kept small for that.

TEST_F(GpuSync, ChannelItemsPassFromAKernelToAKernelAndAStream) {
  pass_through_channel("gpu.kernel-frames", {"64", "2", "4", "65536"}, "ok 64", "device",
                       {"device", "stream"});
}

TEST_F(GpuSync, ChannelItemsPassFromAStreamToAKernel) {
  pass_through_channel("gpu.to-kernel", {"64", "2", "4", "65536"}, "ok 64", "stream",
                       {"device", "stream"});
}

TEST_F(GpuSync, AKernelConsumerOfFourBlocksReleasesItemsInOrderAndNoneEarly) {
  // The blocks take items in turn and release them in order (device::release_in_order): a
  // release that came before the block's reads were done, or before an earlier block's, would
  // let the producer refill a slot still being read, and the reader would count its bytes bad.
  // 4 slots for 4 blocks, so every refill follows a release as closely as it can.
  auto producer = peer({"stream-channel-produce", "gpu.blocks", "128", "1", "4", "65536"});
  auto consumer = peer({"device-channel-consume", "gpu.blocks", "128", "1", "4", "65536", "4"});
  expect_line(producer, "done");
  expect_line(consumer, "ok 128");
}

TEST_F(GpuSync, BarrierRoundsPassBetweenKernelsAndAStream) {
  take_barrier_rounds("gpu.kernel-rounds", {"device", "device", "stream"}, 50);
}

TEST_F(GpuSync, AKernelWaitingOnADeadPartyOrArrivingAfterItDiedIsToldTheBarrierBroke) {
  auto barrier = client->barrier("gpu.kernel-broken", 2);
  auto doomed = doomed_party("gpu.kernel-broken");
  ASSERT_FALSE(HasFatalFailure()) << "the other party never joined";
  auto slots = zeroed("kernel-broken.slots", 4096);
  auto errors = zeroed("kernel-broken.errors", sizeof(unsigned long long));
  auto outcome = zeroed("kernel-broken.outcome", 2 * sizeof(unsigned));
  barrier_rounds_in_kernel(barrier.device(0), static_cast<std::uint32_t*>(slots.data()), 1,
                           static_cast<unsigned long long*>(errors.data()),
                           static_cast<unsigned*>(outcome.data()), stream);
  EXPECT_FALSE(idle_within(100ms)) << "the kernel passed a barrier a party never reached";
  doomed.signal(SIGKILL);
  ASSERT_TRUE(idle_within(2000ms)) << "a kernel waits on a dead party";
  EXPECT_EQ(outcome_of(outcome), (std::array<unsigned, 2>{0, 1})) << "expected: no round, broken";
  // The daemon set the broken word and then moved the dead party's count far ahead, for
  // streams. The kernel above most likely saw the first before the second; one started now
  // sees both at once, and must still tell that the party never arrived.
  std::this_thread::sleep_for(100ms);
  zero_on_device(outcome.data(), outcome.size(), stream);
  barrier_rounds_in_kernel(barrier.device(0), static_cast<std::uint32_t*>(slots.data()), 1,
                           static_cast<unsigned long long*>(errors.data()),
                           static_cast<unsigned*>(outcome.data()), stream);
  ASSERT_TRUE(idle_within(2000ms)) << "a kernel waits on a party that died before it started";
  EXPECT_EQ(outcome_of(outcome), (std::array<unsigned, 2>{0, 1}))
      << "a kernel that started after the death passed the round";
}

TEST_F(GpuSync, AKernelConsumerGetsEveryItemPublishedBeforeTheProducerLeftAndThenBroken) {
  // The producer fills 10 of 16 slots and leaves before the consumer's kernel starts, so every
  // item reaches the kernel through the count the daemon jumped ahead. The kernel's 4 blocks
  // take the items in turn: one stops at item 10 while others still release 8 and 9, which a
  // release that gave up on the broken channel would drop.
  const gpumem::ChannelOptions shape{.slots = 16, .slot_bytes = 4096, .consumers = 1, .device = 0};
  auto channel = client->channel("gpu.left", ChannelRole::consumer, shape);
  auto producer = peer({"stream-channel-produce", "gpu.left", "10", "1", "16", "4096"});
  expect_line(producer, "done");
  ASSERT_EQ(producer.wait(), 0) << "the producer did not exit cleanly";
  ASSERT_TRUE(eventually([&] { return channel.broken(); }))
      << "the producer's leaving broke nothing";
  std::this_thread::sleep_for(100ms);  // the daemon's GPU writes follow the host's flag
  auto errors = zeroed("left.errors", sizeof(unsigned long long));
  auto outcome = zeroed("left.outcome", 2 * sizeof(unsigned));
  pass_items_in_kernel(channel.device(0), false, channel.slot_data(0), shape.slots,
                       shape.slot_bytes, 13, static_cast<unsigned long long*>(errors.data()),
                       static_cast<unsigned*>(outcome.data()), stream, 4);
  ASSERT_TRUE(idle_within(5000ms)) << "a kernel waits on a producer that left";
  EXPECT_EQ(read<unsigned long long>(errors), 0u) << "bytes of an item that was never published";
  EXPECT_EQ(outcome_of(outcome), (std::array<unsigned, 2>{10, 1}))
      << "expected: the 10 items published, then broken";
}

}  // namespace
}  // namespace gpumem::testing
