// device::wait_for (gpumem/device.cuh) against a party that reaches its target just before the
// object breaks, the daemon's order of writes played by the host on words in pinned host memory.
// No daemon: the race is between a kernel's two loads and the two writes, which a daemon's
// round trip would space far apart. Every test skips, with the reason, where no CUDA device is
// usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <thread>

#include "gpumem/device_refs.hpp"
#include "kernels.hpp"
#include "sync_kernels.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

// Blocks of one thread, all resident at once on any GPU that runs the tests, so that every one
// waits while the host writes.
constexpr unsigned kBlocks = 128;
constexpr unsigned kRounds = 200;
constexpr unsigned kTarget = 7;
constexpr unsigned kProducer = 0;

/// Whether the producer reaches the target before the object breaks.
enum class producer { reaches, never_reaches };

// The words as the kernels see them: cudaMallocHost memory is mapped for every device, at the
// same address, where addressing is unified (every 64-bit Linux system CUDA supports).
struct words {
  unsigned counts[2];  // party 0 the producer, party 1 the consumer
  unsigned broken;
  unsigned started;
  unsigned answers[kBlocks];
};

std::atomic_ref<unsigned> word(unsigned& at) {
  return std::atomic_ref<unsigned>(at);
}

class DeviceWait : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto why = why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
    stream = make_stream();
    shared = static_cast<words*>(pinned_malloc(sizeof(words)));
  }
  void TearDown() override {
    if (shared != nullptr) pinned_free(shared);
    if (stream != nullptr) destroy_stream(stream);
  }

  struct round_result {
    bool all_started = false;
    unsigned reached = 0;
    unsigned gave_up = 0;
  };

  /// Every block waits for the producer's kTarget, which it has not reached. Once all have
  /// counted themselves in, the producer reaches it (or not, as @p does) and the object breaks at
  /// once, in the daemon's order (sync::break_party): the broken word, then the producer's count
  /// moved by kBrokenLead. A block that first loads the count after all that (about one in ten,
  /// on an H200) meets no race; the others load it before.
  round_result round(producer does) {
    *shared = words{};
    shared->counts[kProducer] = kTarget - 1;
    const device::counters_ref counters{
        .counts = shared->counts, .broken = &shared->broken, .parties = 2, .party = 1};
    wait_for_in_blocks(counters, kProducer, kTarget, &shared->started, shared->answers, kBlocks,
                       stream);
    round_result result;
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (!(result.all_started = word(shared->started).load() == kBlocks) &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    if (does == producer::reaches) word(shared->counts[kProducer]).store(kTarget);
    // Broken whether or not all blocks started, so that the kernel ends either way.
    const unsigned count = word(shared->counts[kProducer]).load();
    word(shared->broken).store(1);
    word(shared->counts[kProducer]).store(count + device::kBrokenLead);
    synchronize(stream);
    result.reached = static_cast<unsigned>(
        std::count(std::begin(shared->answers), std::end(shared->answers), kWaitReached));
    result.gave_up = static_cast<unsigned>(
        std::count(std::begin(shared->answers), std::end(shared->answers), kWaitGaveUp));
    return result;
  }

  /// The waits of kRounds rounds, the producer doing as @p does, that answered @p answer. A round
  /// in which a block did not start, or did not answer, fails the test and ends the count.
  unsigned answers_over_rounds(producer does, unsigned answer) {
    unsigned answered = 0;
    for (unsigned each = 0; each < kRounds; ++each) {
      const round_result result = round(does);
      if (!result.all_started || result.reached + result.gave_up != kBlocks) {
        ADD_FAILURE() << "round " << each << ": " << result.reached << " reached and "
                      << result.gave_up << " gave up of " << kBlocks << " blocks"
                      << (result.all_started ? "" : ", not all of them started in 10 s");
        break;
      }
      answered += answer == kWaitReached ? result.reached : result.gave_up;
    }
    return answered;
  }

  stream_t stream = nullptr;
  words* shared = nullptr;
};

// A block that loaded the count before the producer reached it, and the broken word after the
// break, gave up on a target that was reached: before wait_for read the count again (85b44de),
// 22,915-23,261 of the 25,600 waits did so in five runs on an H200.
TEST_F(DeviceWait, AKernelGetsWhatAPartyReachedJustBeforeTheObjectBroke) {
  EXPECT_EQ(answers_over_rounds(producer::reaches, kWaitGaveUp), 0u)
      << "waits that gave up on a reached target, of " << kRounds * kBlocks;
}

// A wait that took any count read after the break for reached would take the daemon's jump
// (22,980-23,352 of 25,600 waits did, on an H200, with that second read not checked).
TEST_F(DeviceWait, AKernelGivesUpOnWhatAPartyNeverReachedBeforeTheObjectBroke) {
  EXPECT_EQ(answers_over_rounds(producer::never_reaches, kWaitReached), 0u)
      << "waits that took the daemon's jump for the target, of " << kRounds * kBlocks;
}

}  // namespace
}  // namespace gpumem::testing
