// How long a call spins for its answer in the request mailbox before it sleeps
// (client/src/answer_spin.hpp): the learnt budget, the default by the CPUs a process may use,
// $GPUMEM_ANSWER_SPIN_US, and spinning calls against a real gpumemd that dies under them.
#include "answer_spin.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gpumem/gpumem.hpp"
#include "gpumem/shared/sync/spin_budget.hpp"
#include "support/systemd_supervisor.hpp"

namespace {

using namespace std::chrono_literals;
using gpumem::sync::spin_budget;
using gpumem::testing::systemd_supervisor;

/// Sets an environment variable for one scope.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~scoped_env() { ::unsetenv(name_); }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
};

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

/// Runs @p check in a child pinned to one CPU; true when it returned true.
bool on_one_cpu(const auto& check) {
  const pid_t child = ::fork();
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (::sched_setaffinity(0, sizeof one, &one) != 0) ::_exit(2);
    ::_exit(check() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(AnswerSpin, AProcessOnOneCpuSleepsAtOnceUnlessTheEnvironmentSaysOtherwise) {
  EXPECT_TRUE(on_one_cpu([] {
    return gpumem::detail::usable_cpus() == 1 &&
           gpumem::detail::longest_answer_spin() == std::chrono::microseconds(0);
  }));
  EXPECT_TRUE(on_one_cpu([] {
    const scoped_env set("GPUMEM_ANSWER_SPIN_US", "200");
    return gpumem::detail::longest_answer_spin() == std::chrono::microseconds(200);
  }));
  const scoped_env never("GPUMEM_ANSWER_SPIN_US", "0");
  EXPECT_EQ(gpumem::detail::longest_answer_spin(), std::chrono::microseconds(0));
}

TEST(AnswerSpin, ABadGpumemAnswerSpinUsIsAnErrorThatNamesIt) {
  for (const char* bad : {"lots", "-1", "1001", "20us"}) {
    const scoped_env set("GPUMEM_ANSWER_SPIN_US", bad);
    try {
      (void)gpumem::detail::longest_answer_spin();
      ADD_FAILURE() << "GPUMEM_ANSWER_SPIN_US=" << bad << " was taken";
    } catch (const gpumem::Error& error) {
      EXPECT_EQ(error.status(), gpumem::errc::invalid_argument);
      EXPECT_NE(std::string(error.what()).find(std::string("$GPUMEM_ANSWER_SPIN_US is '") + bad),
                std::string::npos)
          << error.what();
    }
  }
}

/// A cgroup tree in a temporary folder: @p quotas maps a group ("" the root) to its cpu.max.
struct fake_cgroups {
  fake_cgroups(const std::string& own_group,
               std::initializer_list<std::pair<std::string, std::string>> quotas)
      : root(std::filesystem::temp_directory_path() /
             ("gpumem-cgroups-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
    std::ofstream(root / "membership") << "0::" << own_group << "\n";
    for (const auto& [group, quota] : quotas) {
      std::filesystem::create_directories(root.string() + group);
      std::ofstream(root.string() + group + "/cpu.max") << quota << "\n";
    }
  }
  ~fake_cgroups() { std::filesystem::remove_all(root); }
  double cpus() const { return gpumem::detail::usable_cpus(root, root / "membership"); }

  std::filesystem::path root;
};

TEST(AnswerSpin, TheCpuQuotaOfTheProcessesCgroupOrOfAParentCounts) {
  cpu_set_t affinity;
  CPU_ZERO(&affinity);
  ASSERT_EQ(::sched_getaffinity(0, sizeof affinity, &affinity), 0);
  const double all = CPU_COUNT(&affinity);
  EXPECT_EQ(fake_cgroups("/pods/worker", {{"/pods/worker", "max 100000"}}).cpus(), all);
  EXPECT_EQ(fake_cgroups("/pods/worker", {{"/pods/worker", "50000 100000"}}).cpus(),
            std::min(all, 0.5));
  EXPECT_EQ(
      fake_cgroups("/pods/worker", {{"/pods", "150000 100000"}, {"/pods/worker", "max 1"}}).cpus(),
      std::min(all, 1.5));
  EXPECT_EQ(fake_cgroups("/", {{"", "100000 100000"}}).cpus(), std::min(all, 1.0));
  EXPECT_EQ(fake_cgroups("/no/such/group", {}).cpus(), all);  // cgroup v1, or no quota file
}

// Calls that spin (forced here: a machine with one CPU would not spin by default) are
// answered, and a daemon that dies under a spinning call is noticed and the call goes on.
TEST(AnswerSpin, SpinningCallsAreAnsweredAndOutliveADaemonKilledUnderThem) {
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

}  // namespace
