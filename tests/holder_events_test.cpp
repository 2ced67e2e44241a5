// A CUDA pool's holders' release events on the fake driver: each client's handle is opened once
// and the release stream waits on that opening for its later releases, a new handle takes the
// old one's place, and a client's event goes when it is forgotten or fails to serve; none is
// left open or destroyed twice, and no wait is queued on one that is not alive.
#include "memory/holder_events.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "support/fake_driver.hpp"

namespace gpumem::daemon {
namespace {

using gpumem::testing::fake;
using gpumem::testing::fake_driver;
using gpumem::testing::fake_primary_context;
using gpumem::testing::kind;
using gpumem::testing::reset_fake_driver;

class HolderEvents : public ::testing::Test {
 protected:
  void SetUp() override {
    reset_fake_driver();
    fake().current = fake_primary_context(0);
    events.emplace(fake_driver());
  }
  void TearDown() override {
    events.reset();
    EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();
    EXPECT_EQ(fake().live_count(kind::event), 0u) << "every opened event is destroyed";
  }

  static ipc_handle handle(unsigned char tag) {
    ipc_handle made{};
    made[3] = std::byte{tag};
    return made;
  }
  /// The release stream's wait for @p holder's release marked with @p tag's handle, as queued.
  failed_call release(std::uint64_t holder, unsigned char tag) {
    return events->wait_on(holder, handle(tag), fake().current, kReleaseStream);
  }
  /// The event that @p holder's release with @p tag's handle was waited on through, expecting
  /// the wait to be queued.
  CUevent waited_on(std::uint64_t holder, unsigned char tag) {
    const auto waits = fake().event_waits.size();
    const failed_call failed = release(holder, tag);
    EXPECT_FALSE(failed) << failed.call;
    EXPECT_EQ(fake().event_waits.size(), waits + 1);
    if (fake().event_waits.size() != waits + 1) return nullptr;
    EXPECT_EQ(fake().event_waits.back().first, kReleaseStream);
    return fake().event_waits.back().second;
  }

  const CUstream kReleaseStream = reinterpret_cast<CUstream>(std::uintptr_t{0x5eed});
  std::optional<holder_events> events;
};

TEST_F(HolderEvents, AClientsHandleIsOpenedOnceAndServesItsLaterReleases) {
  const CUevent first = waited_on(7, 1);
  EXPECT_EQ(waited_on(7, 1), first);
  EXPECT_EQ(waited_on(7, 1), first);
  EXPECT_EQ(fake().made[kind::event], 1);
  EXPECT_EQ(events->kept(), 1u);
}

TEST_F(HolderEvents, ANewHandleFromTheClientTakesTheOldOnesPlace) {
  const CUevent first = waited_on(7, 1);
  const CUevent second = waited_on(7, 2);
  EXPECT_NE(second, first);
  EXPECT_EQ(fake().made[kind::event], 2);
  EXPECT_EQ(fake().live_count(kind::event), 1u) << "the first is destroyed";
  EXPECT_EQ(events->kept(), 1u);
  EXPECT_NE(waited_on(7, 1), second) << "opened again, not the second's";
}

TEST_F(HolderEvents, TheSameHandleFromAnotherClientIsOpenedForThatClient) {
  // Another client's bytes are not trusted to name the event kept for this one.
  const CUevent mine = waited_on(7, 1);
  const CUevent theirs = waited_on(8, 1);
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(events->kept(), 2u);
  EXPECT_EQ(fake().live_count(kind::event), 2u);
}

TEST_F(HolderEvents, AForgottenClientsEventIsDestroyedAndTheOthersKept) {
  waited_on(7, 1);
  const CUevent theirs = waited_on(8, 2);
  events->forget(7);
  events->forget(9);  // never released with an event: nothing to do
  EXPECT_EQ(events->kept(), 1u);
  EXPECT_EQ(fake().live_count(kind::event), 1u);
  EXPECT_EQ(waited_on(8, 2), theirs);
  waited_on(7, 1);
  EXPECT_EQ(fake().made[kind::event], 3) << "a forgotten client's handle is opened again";
}

TEST_F(HolderEvents, AHandleThatCannotBeOpenedLeavesTheClientNoEvent) {
  waited_on(7, 1);
  fake().failing = "cuIpcOpenEventHandle";
  fake().fail_with = CUDA_ERROR_INVALID_VALUE;
  const failed_call failed = release(7, 2);
  EXPECT_EQ(failed.call, holder_events::kOpenCall);
  EXPECT_EQ(failed.status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake().event_waits.size(), 1u) << "the failed release queued no wait";
  EXPECT_EQ(events->kept(), 0u) << "nor the one from before: it is not the client's newest";
  EXPECT_EQ(fake().live_count(kind::event), 0u);
  fake().failing.clear();
  waited_on(7, 1);
  EXPECT_EQ(fake().made[kind::event], 2);
}

TEST_F(HolderEvents, AWaitThatCannotBeQueuedLeavesTheClientNoEventAndItsNextReleaseOpensAfresh) {
  const CUevent first = waited_on(7, 1);
  fake().failing = "cuStreamWaitEvent";
  fake().fail_with = CUDA_ERROR_LAUNCH_FAILED;
  const failed_call failed = release(7, 1);
  EXPECT_STREQ(failed.call, "cuStreamWaitEvent(released)");
  EXPECT_EQ(failed.status, CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(events->kept(), 0u) << "the opening that failed to serve is let go";
  EXPECT_EQ(fake().live_count(kind::event), 0u);
  fake().failing.clear();
  EXPECT_NE(waited_on(7, 1), nullptr);
  EXPECT_EQ(fake().made[kind::event], 2) << "opened again, not the one that failed: " << first;
}

}  // namespace
}  // namespace gpumem::daemon
