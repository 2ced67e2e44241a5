// Versions and sleep of reservations on a GPU, across real processes: a real gpumemd, CUDA
// clients that check bytes with kernels, free memory as another process sees it. Every test
// skips, with the reason, where no CUDA device is usable, and fails under GPUMEM_REQUIRE_GPU=1.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <string_view>

#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"
#include "kernels.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/metric_value.hpp"
#include "support/temporary_file.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;

bool gpu_required() {
  const char* required = std::getenv("GPUMEM_REQUIRE_GPU");
  return required != nullptr && std::string_view(required) == "1";
}

class GpuReservation : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto why = why_no_gpu(); !why.empty()) {
      if (gpu_required()) FAIL() << "GPUMEM_REQUIRE_GPU=1 and this GPU test skipped: " << why;
      GTEST_SKIP() << why;
    }
    daemon = std::make_unique<daemon_process>();
    client.emplace(daemon->connect("gpu-reservation-test"));
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
  /// Free device memory as a process other than the daemon and this one sees it.
  std::size_t free_in_another_process() const {
    auto probe = peer({"free-memory"});
    const auto line = probe.read_line(30s);
    EXPECT_TRUE(line && line->starts_with("free ")) << (line ? *line : "(no line)");
    return line && line->starts_with("free ") ? std::stoull(line->substr(5)) : 0;
  }
  /// Writes version @p version of @p weights, @p bytes of the seed @p version, and commits it.
  void publish(Reservation& weights, std::uint64_t version, std::size_t bytes) {
    auto draft = weights.begin_version(bytes);
    ASSERT_EQ(draft.version(), version);
    fill_on_device(draft.data(), bytes, static_cast<std::uint32_t>(version), stream);
    synchronize(stream);
    draft.commit();
  }

  std::unique_ptr<daemon_process> daemon;
  std::optional<gpumem::Client> client;
  stream_t stream = nullptr;
};

TEST_F(GpuReservation, ReadersSeeEachVersionWholeInOrderAtTheSameAddress) {
  auto weights = Reservation::create(*client, 256 * kMiB,
                                     {.device = 0, .name = "weights", .initial = 64 * kMiB});
  fill_on_device(weights.data(), 64 * kMiB, 1, stream);
  synchronize(stream);
  std::vector<child_process> readers;
  for (int index = 0; index < 3; ++index)
    readers.push_back(peer({"reservation-watch", "weights", "4"}));
  std::vector<std::string> pointers;
  for (auto& reader : readers) {
    const auto line = reader.read_line(30s);
    ASSERT_TRUE(line && line->starts_with("mapped 1 ")) << (line ? *line : "(no line)");
    pointers.push_back(line->substr(9));
  }
  // Versions 2..4 differ in size: 128 MiB, 32 MiB, 256 MiB.
  const std::size_t sizes[] = {0, 0, 128 * kMiB, 32 * kMiB, 256 * kMiB};
  for (std::uint64_t version = 2; version <= 4; ++version) {
    publish(weights, version, sizes[version]);
    for (std::size_t index = 0; index < readers.size(); ++index) {
      EXPECT_EQ(readers[index].read_line(60s),
                "version " + std::to_string(version) + " ok " + pointers[index])
          << "reader " << index;
    }
  }
  EXPECT_EQ(weights.version(), 4u);
  EXPECT_EQ(weights.size(), 256 * kMiB);
  EXPECT_EQ(mismatches_on_device(weights.data(), 256 * kMiB, 4, stream), 0u);
  for (auto& reader : readers) EXPECT_EQ(reader.wait(), 0);
  const auto listed = client->reservations();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].retained_bytes, 0u) << "no holder maps an older version any more";
}

TEST_F(GpuReservation, ASleepingGigabyteFreesTheDeviceAndWakesWithItsBytes) {
  auto weights =
      Reservation::create(*client, kGiB, {.device = 0, .name = "sleeper", .initial = kGiB});
  fill_on_device(weights.data(), kGiB, 7, stream);
  synchronize(stream);
  void* const base = weights.data();
  const std::size_t awake_free = free_in_another_process();
  weights.sleep();
  EXPECT_EQ(weights.state(), ReservationState::asleep);
  EXPECT_EQ(weights.size(), 0u);
  EXPECT_GE(free_in_another_process(), awake_free + kGiB - 64 * kMiB)
      << "the chunks are freed while it sleeps";
  EXPECT_EQ(weights.status().host_bytes, kGiB);
  weights.wake();
  EXPECT_EQ(weights.data(), base);
  EXPECT_EQ(weights.size(), kGiB);
  EXPECT_EQ(weights.status().host_bytes, 0u) << "the host copy is returned after wake";
  auto checker = peer({"reservation-verify", "sleeper", std::to_string(kGiB), "7"});
  EXPECT_EQ(checker.read_line(60s), "ok") << "another process reads the woken bytes";
  EXPECT_EQ(mismatches_on_device(weights.data(), kGiB, 7, stream), 0u);
}

// A large reservation is cut into fewer, larger chunks (at most 256 when full), so that a
// holder's mapping, a sleep and a wake cost a few hundred driver calls, not thousands.
TEST_F(GpuReservation, ALargeReservationHasAtMost256ChunksAndGrowsByWholeOnes) {
  auto big =
      Reservation::create(*client, 16 * kGiB, {.device = 0, .name = "big", .initial = 100 * kMiB});
  EXPECT_EQ(big.chunk_size(), 64 * kMiB) << "16 GiB in 256 chunks of the 2 MiB granularity x 32";
  EXPECT_EQ(big.max_size(), 16 * kGiB);
  EXPECT_EQ(big.size(), 128 * kMiB) << "rounded up to whole chunks";
  fill_on_device(big.data(), big.size(), 4, stream);
  synchronize(stream);
  auto reader_client = daemon->connect("big-reader");
  auto reader = Reservation::open(reader_client, "big", {.access = Access::read_only});
  EXPECT_EQ(reader.chunk_size(), 64 * kMiB);
  EXPECT_EQ(mismatches_on_device(reader.data(), 128 * kMiB, 4, stream), 0u);
  big.resize(129 * kMiB);
  EXPECT_EQ(big.size(), 192 * kMiB);
  fill_on_device(big.data(), big.size(), 5, stream);
  synchronize(stream);
  reader.quiesce();
  big.sleep();
  big.wake();
  EXPECT_EQ(mismatches_on_device(big.data(), 192 * kMiB, 5, stream), 0u);
  auto odd = Reservation::create(*client, kGiB + kMiB, {.device = 0, .initial = 0});
  EXPECT_EQ(odd.chunk_size(), 8 * kMiB) << "257 chunks of 4 MiB would be one too many";
  EXPECT_EQ(odd.max_size(), kGiB + 8 * kMiB);
}

// The wake keeps the host copy within sleep_memory_kept; the next sleep copies into it (the
// daemon says so) instead of making new pages, and the wake after it brings the new bytes, not
// the old.
TEST_F(GpuReservation, AKeptHostCopyTakesTheNextSleepsNewBytes) {
  const temporary_file config("gpu-sleep-kept", "sleep_memory_kept: 1GiB\n");
  daemon_process keeping({"--config", config.path()}, true);
  auto owner = keeping.connect("gpu-sleep-kept");
  constexpr std::size_t kBytes = 256 * kMiB;
  auto weights =
      Reservation::create(owner, kBytes, {.device = 0, .name = "cycled", .initial = kBytes});
  for (const std::uint32_t seed : {7u, 8u}) {
    fill_on_device(weights.data(), kBytes, seed, stream);
    synchronize(stream);
    weights.sleep();
    weights.wake();
    EXPECT_EQ(mismatches_on_device(weights.data(), kBytes, seed, stream), 0u) << "seed " << seed;
    EXPECT_EQ(metric_value(owner.metrics(), "gpumemd_sleep_memory_kept_bytes"), kBytes);
  }
  std::string log;
  EXPECT_TRUE(keeping.read_log_until("into the copy its last wake kept", 5s, log)) << log;
  weights.release();
  EXPECT_EQ(metric_value(owner.metrics(), "gpumemd_sleep_memory_kept_bytes"), 0)
      << "the kept copy goes with the reservation";
}

TEST_F(GpuReservation, AHolderThatNeverLetsGoIsNamedAndKeepsItsMapping) {
  auto weights =
      Reservation::create(*client, 64 * kMiB, {.device = 0, .name = "held", .initial = 64 * kMiB});
  fill_on_device(weights.data(), 64 * kMiB, 5, stream);
  synchronize(stream);
  auto holder = peer({"reservation-hold-still", "held", std::to_string(64 * kMiB), "5"});
  ASSERT_EQ(holder.read_line(30s), "ready");
  try {
    weights.sleep({.deadline = 500ms});
    ADD_FAILURE() << "the sleep did not fail";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::busy);
    EXPECT_NE(std::string(error.what()).find("pid " + std::to_string(holder.pid())),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(weights.status().state, ReservationState::awake);
  weights.refresh();
  EXPECT_EQ(mismatches_on_device(weights.data(), 64 * kMiB, 5, stream), 0u);
  holder.signal(SIGTERM);
  EXPECT_EQ(holder.read_line(30s), "ok") << "nothing was freed under the holder";
}

TEST_F(GpuReservation, ADiscardingSleepWakesZeroedOnTheDevice) {
  auto cache =
      Reservation::create(*client, 64 * kMiB, {.device = 0, .name = "cache", .initial = 64 * kMiB});
  fill_on_device(cache.data(), 64 * kMiB, 9, stream);
  synchronize(stream);
  cache.sleep({.discard = true});
  EXPECT_EQ(cache.status().host_bytes, 0u);
  cache.wake();
  EXPECT_EQ(nonzero_on_device(cache.data(), 64 * kMiB, stream), 0u);
}

}  // namespace
}  // namespace gpumem::testing
