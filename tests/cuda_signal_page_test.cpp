// The daemon's signal page on a CUDA device, on the fake driver: how long the daemon waits for
// the writes on its repairs stream to land. A client can hold that stream up (a lock turn that
// shares its hardware queue), so the wait is bounded, and only the first request after the
// hold-up pays the bound.
#include "sync/cuda_signal_page.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "support/fake_driver.hpp"

namespace gpumem::daemon {
namespace {

using namespace std::chrono_literals;
using gpumem::testing::fake;
using gpumem::testing::fake_driver;
using gpumem::testing::reset_fake_driver;
using clock_type = std::chrono::steady_clock;

/// The repairs stream queries as not drained from now on, or drained again.
void hold_up_repairs(bool held) {
  fake().failing = held ? "cuStreamQuery" : "";
  fake().fail_with = CUDA_ERROR_NOT_READY;
}

TEST(CudaSignalPage, OnlyTheFirstClearOrReadAfterItsRepairsAreHeldUpWaitsForThem) {
  reset_fake_driver();
  {
    cuda_signal_page page(fake_driver(), 0);
    const auto time_to_clear = [&](std::uint32_t cell) {
      const auto start = clock_type::now();
      page.clear(cell);
      return clock_type::now() - start;
    };
    hold_up_repairs(true);
    EXPECT_GE(time_to_clear(1), 1ms) << "the first clear gave its zeroes no time to land";

    const int queried = fake().calls["cuStreamQuery"];
    page.clear(2);
    EXPECT_EQ(page.read(2, 0), 0u);
    EXPECT_EQ(fake().calls["cuStreamQuery"] - queried, 2)
        << "while still held up, a clear and a read each looked once and went on";

    hold_up_repairs(false);
    page.clear(3);  // landed: the page waits again for the next hold-up
    hold_up_repairs(true);
    EXPECT_GE(time_to_clear(4), 1ms) << "a new hold-up was not waited for";
    EXPECT_EQ(fake().calls["cuStreamBatchMemOp"], 4) << "one batch of zeroes per clear";
  }
  EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();
  EXPECT_EQ(fake().retained(), 0);
}

}  // namespace
}  // namespace gpumem::daemon
