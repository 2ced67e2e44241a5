// A CUDA pool's holders' release events on the fake driver: each client's handle is opened once
// and serves its later releases, a new handle takes the old one's place, and a client's event
// goes when it is forgotten; none is left open or destroyed twice.
#include "memory/holder_events.hpp"

#include <gtest/gtest.h>

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
    events.emplace(fake_driver(), fake().current);
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
  /// The event @p client's release with @p tag's handle waits on, expecting the open to work.
  CUevent open(std::uint64_t client, unsigned char tag) {
    CUevent event = nullptr;
    EXPECT_EQ(events->open(client, handle(tag), event), CUDA_SUCCESS);
    EXPECT_NE(event, nullptr);
    return event;
  }

  std::optional<holder_events> events;
};

TEST_F(HolderEvents, AClientsHandleIsOpenedOnceAndServesItsLaterReleases) {
  const CUevent first = open(7, 1);
  EXPECT_EQ(open(7, 1), first);
  EXPECT_EQ(open(7, 1), first);
  EXPECT_EQ(fake().made[kind::event], 1);
  EXPECT_EQ(events->kept(), 1u);
}

TEST_F(HolderEvents, ANewHandleFromTheClientTakesTheOldOnesPlace) {
  const CUevent first = open(7, 1);
  const CUevent second = open(7, 2);
  EXPECT_NE(second, first);
  EXPECT_EQ(fake().made[kind::event], 2);
  EXPECT_EQ(fake().live_count(kind::event), 1u) << "the first is destroyed";
  EXPECT_EQ(events->kept(), 1u);
  EXPECT_NE(open(7, 1), second) << "opened again, not the second's";
}

TEST_F(HolderEvents, TheSameHandleFromAnotherClientIsOpenedForThatClient) {
  // Another client's bytes are not trusted to name the event kept for this one.
  const CUevent mine = open(7, 1);
  const CUevent theirs = open(8, 1);
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(events->kept(), 2u);
  EXPECT_EQ(fake().live_count(kind::event), 2u);
}

TEST_F(HolderEvents, AForgottenClientsEventIsDestroyedAndTheOthersKept) {
  open(7, 1);
  const CUevent theirs = open(8, 2);
  events->forget(7);
  events->forget(9);  // never released with an event: nothing to do
  EXPECT_EQ(events->kept(), 1u);
  EXPECT_EQ(fake().live_count(kind::event), 1u);
  EXPECT_EQ(open(8, 2), theirs);
  open(7, 1);
  EXPECT_EQ(fake().made[kind::event], 3) << "a forgotten client's handle is opened again";
}

TEST_F(HolderEvents, AHandleThatCannotBeOpenedLeavesTheClientNoEvent) {
  open(7, 1);
  fake().failing = "cuIpcOpenEventHandle";
  fake().fail_with = CUDA_ERROR_INVALID_VALUE;
  CUevent event = nullptr;
  EXPECT_EQ(events->open(7, handle(2), event), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(event, nullptr);
  EXPECT_EQ(events->kept(), 0u) << "nor the one from before: it is not the client's newest";
  EXPECT_EQ(fake().live_count(kind::event), 0u);
  fake().failing.clear();
  open(7, 1);
  EXPECT_EQ(fake().made[kind::event], 2);
}

}  // namespace
}  // namespace gpumem::daemon
