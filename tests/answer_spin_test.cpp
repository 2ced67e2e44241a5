// How long a call spins for its answer in the request mailbox before it sleeps
// ($GPUMEM_ANSWER_SPIN_US, client/src/transport.cpp): the learnt budget, bad settings, and
// spinning calls against a real gpumemd that dies or stops between them.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "gpumem/gpumem.hpp"
#include "gpumem/shared/sync/spin_budget.hpp"
#include "support/scoped_env.hpp"
#include "support/systemd_supervisor.hpp"

namespace {

using namespace std::chrono_literals;
using gpumem::sync::spin_budget;
using gpumem::testing::scoped_env;
using gpumem::testing::systemd_supervisor;

TEST(AnswerSpin, TheBudgetGrowsWithShortSleepsDecaysWhileAnsweredAndStopsWhereWaitsOutlastIt) {
  spin_budget budget(0ns, 50us);
  EXPECT_EQ(budget.now(), 0ns);  // the first call sleeps and learns
  budget.learn(12us, true);
  EXPECT_EQ(budget.now(), 24us);
  budget.learn(40us, true);
  EXPECT_EQ(budget.now(), 50us);  // never above the most
  budget.learn(10us, false);      // answered while spinning: decays slowly
  EXPECT_LT(budget.now(), 50us);
  EXPECT_GT(budget.now(), 49us);
  // Each wait outlasts the most (more busy clients than cores): halved until it spins no more.
  for (int wait = 0; wait < 40; ++wait) budget.learn(300us, true);
  EXPECT_EQ(budget.now(), 0ns);
  budget.learn(8us, true);  // the node quietened: spinning pays again
  EXPECT_EQ(budget.now(), 16us);
}

TEST(AnswerSpin, ABudgetWhoseMostIsZeroNeverSpins) {
  spin_budget budget(0ns, 0ns);
  budget.learn(5us, true);
  budget.learn(500us, true);
  budget.learn(1us, false);
  EXPECT_EQ(budget.now(), 0ns);
}

TEST(AnswerSpin, ABadGpumemAnswerSpinUsFailsTheConnectWithAnErrorThatNamesIt) {
  systemd_supervisor daemon({});
  daemon.start();
  for (const char* bad : {"lots", "-1", "1001", "20us"}) {
    const scoped_env set("GPUMEM_ANSWER_SPIN_US", bad);
    try {
      (void)daemon.connect();
      ADD_FAILURE() << "GPUMEM_ANSWER_SPIN_US=" << bad << " was taken";
    } catch (const gpumem::Error& error) {
      EXPECT_EQ(error.status(), gpumem::errc::invalid_argument);
      EXPECT_NE(std::string(error.what()).find(std::string("$GPUMEM_ANSWER_SPIN_US is '") + bad),
                std::string::npos)
          << error.what();
    }
  }
  for (const char* good : {"", "0", "1000"}) {
    const scoped_env set("GPUMEM_ANSWER_SPIN_US", good);
    daemon.connect().ping();
  }
}

// Calls that spin (the longest spin the setting allows) are answered, and after a daemon was
// killed between them, the next call notices, reconnects and goes on.
TEST(AnswerSpin, SpinningCallsAreAnsweredAndGoOnAfterADaemonKilledBetweenThem) {
  const scoped_env spin("GPUMEM_ANSWER_SPIN_US", "1000");
  systemd_supervisor daemon({});
  daemon.start();
  auto client = daemon.connect();
  for (int call = 0; call < 2000; ++call) client.ping();
  auto kept = client.allocate(4096, {.device = gpumem::kHost, .name = "spun.kept"});
  static_cast<unsigned char*>(kept.data())[0] = 42;
  daemon.kill(SIGKILL);
  daemon.start();
  auto after = client.allocate(4096, {.device = gpumem::kHost});
  EXPECT_EQ(after.size(), 4096u);
  auto reopened = client.open("spun.kept");
  EXPECT_EQ(static_cast<const unsigned char*>(reopened.data())[0], 42);
  client.ping();
}

// The spin never holds a call past its timeout: against a stopped daemon the call fails in time.
TEST(AnswerSpin, ASpinningCallToAStoppedDaemonStillTimesOut) {
  const scoped_env spin("GPUMEM_ANSWER_SPIN_US", "1000");
  systemd_supervisor daemon({});
  daemon.start();
  auto client = gpumem::Client::connect({.socket_path = daemon.socket_path(), .timeout = 50ms});
  for (int call = 0; call < 200; ++call) client.ping();  // the budget learnt from short calls
  ::kill(daemon.pid(), SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  try {
    client.ping();
    ADD_FAILURE() << "a stopped daemon answered";
  } catch (const gpumem::Error& error) {
    EXPECT_EQ(error.status(), gpumem::errc::timed_out) << error.what();
  }
  const auto took = std::chrono::steady_clock::now() - start;
  ::kill(daemon.pid(), SIGCONT);
  EXPECT_GE(took, 50ms);
  EXPECT_LT(took, 1s);
}

}  // namespace
