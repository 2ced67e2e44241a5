// gpumemd in its own PID namespace (a Kubernetes DaemonSet without hostPID), its clients
// outside it: the kernel gives the daemon pid 0 for each of them. What operators see must stay
// true (`gpumemctl clients` and `locks`: no pid it does not know, a held lock shown held and by
// which client), and a killed lock holder must still be seen dead. The daemon runs under
// `unshare --pid --fork`, which needs root (CAP_SYS_ADMIN); the test is skipped without it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/temporary_folder.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

/// Why this machine cannot make a PID namespace here; empty when it can.
std::string why_no_pid_namespace() {
  child_process probe({"/usr/bin/unshare", "--pid", "--fork", "/bin/true"}, {},
                      {.stderr_to_stdout = true, .user = std::nullopt});
  std::string said;
  while (const auto line = probe.read_line(5s)) said += *line + " ";
  const auto status = probe.wait(10s);
  if (status && exit_code(*status) == 0) return {};
  return "unshare --pid --fork fails here (needs root): " + said;
}

/// gpumemd as pid 1 of a new PID namespace; this test and its children are outside it.
struct namespaced_daemon {
  namespaced_daemon()
      : folder(make_temporary_folder("pidns")),
        socket(folder + "/gpumemd.sock"),
        // --kill-child: the daemon goes with unshare when the test ends.
        process({"/usr/bin/unshare", "--pid", "--fork", "--kill-child", daemon_binary(), "--socket",
                 socket, "--log-level", "warn"}) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    for (;;) {
      try {
        connect("probe").ping();
        return;
      } catch (const Error&) {
        if (std::chrono::steady_clock::now() > deadline) {
          throw std::runtime_error("gpumemd did not start in its PID namespace");
        }
        std::this_thread::sleep_for(5ms);
      }
    }
  }
  ~namespaced_daemon() {
    // unshare passes no signal on to its child; killed, it takes the daemon along
    // (--kill-child).
    process.signal(SIGKILL);
    process.wait(20s);
    std::error_code ignored;
    std::filesystem::remove_all(folder, ignored);
  }
  Client connect(const std::string& label) const {
    return Client::connect({.socket_path = socket, .label = label});
  }
  /// gpumemctl @p args, its output and exit code.
  std::pair<std::string, int> ctl(std::vector<std::string> args) const {
    args.insert(args.begin(), {GPUMEM_TEST_CTL, "--socket", socket});
    child_process run(args, {}, {.stderr_to_stdout = true, .user = std::nullopt});
    std::string all;
    while (const auto line = run.read_line(10s)) all += *line + "\n";
    const auto status = run.wait();
    return {all, status ? exit_code(*status) : -1};
  }
  json ctl_json(const std::string& command) const {
    const auto [text, code] = ctl({command, "--json"});
    EXPECT_EQ(code, 0) << text;
    return json::parse(text);
  }

  std::string folder;
  std::string socket;
  child_process process;
};

class PidNamespace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = why_no_pid_namespace(); !why.empty()) GTEST_SKIP() << why;
    daemon.emplace();
  }
  std::optional<namespaced_daemon> daemon;
};

TEST_F(PidNamespace, ClientsShowNoPidTheDaemonCannotSeeAndTheirOwnReportedPid) {
  auto client = daemon->connect("outside");
  const json clients = daemon->ctl_json("clients");
  bool found = false;
  for (const auto& each : clients) {
    // pid 0 from the kernel means "not visible": never shown as a pid.
    EXPECT_TRUE(each.at("pid").is_null()) << each;
    if (each.at("id") == client.id()) {
      found = true;
      EXPECT_EQ(each.at("reported_pid"), ::getpid()) << each;
      EXPECT_EQ(each.at("label"), "outside");
    }
  }
  EXPECT_TRUE(found) << clients;
  const auto [table, code] = daemon->ctl({"clients"});
  EXPECT_EQ(code, 0);
  EXPECT_NE(table.find("OWN PID (CLIENT-REPORTED)"), std::string::npos) << table;
  EXPECT_NE(table.find("- (not in gpumemd's PID namespace)"), std::string::npos) << table;
  EXPECT_NE(table.find(std::to_string(::getpid())), std::string::npos) << table;
}

TEST_F(PidNamespace, AHeldLockShowsHeldAndByWhichClient) {
  auto client = daemon->connect("holder");
  auto lock = client.lock("shown");
  lock.lock();
  const json locks = daemon->ctl_json("locks");
  ASSERT_EQ(locks.size(), 1u) << locks;
  EXPECT_EQ(locks[0].at("state"), "held") << locks;
  EXPECT_EQ(locks[0].at("held"), true) << locks;
  EXPECT_EQ(locks[0].at("owner_client"), client.id()) << locks;
  EXPECT_TRUE(locks[0].at("owner_pid").is_null()) << locks;
  const auto [table, code] = daemon->ctl({"locks"});
  EXPECT_EQ(code, 0);
  EXPECT_NE(table.find("held"), std::string::npos) << table;
  EXPECT_NE(table.find("client " + std::to_string(client.id())), std::string::npos) << table;
  EXPECT_NE(table.find("- (not in gpumemd's PID namespace)"), std::string::npos) << table;

  lock.unlock();
  const json freed = daemon->ctl_json("locks");
  EXPECT_EQ(freed[0].at("state"), "free") << freed;
  EXPECT_EQ(freed[0].at("held"), false) << freed;
  EXPECT_TRUE(freed[0].at("owner_client").is_null()) << freed;
}

TEST_F(PidNamespace, AKilledHolderOutsideIsStillSeenDeadAndItsLockHandedOnWithOwnerDied) {
  auto client = daemon->connect("waiter");
  auto lock = client.lock("robust");
  child_process holder({peer_binary(), "lock-hold", "robust"}, {"GPUMEM_SOCKET=" + daemon->socket});
  ASSERT_EQ(holder.read_line(10s), std::optional<std::string>("held"));
  const json locks = daemon->ctl_json("locks");
  ASSERT_EQ(locks.size(), 1u);
  EXPECT_EQ(locks[0].at("state"), "held") << locks;
  auto waiter = std::async(std::launch::async, [&] { return lock.acquire(); });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(waiter.wait_for(0ms), std::future_status::timeout);
  holder.signal(SIGKILL);
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(waiter.get(), LockStatus::acquired_owner_died);
  EXPECT_EQ(daemon->ctl_json("locks")[0].at("owner_deaths"), 1) << daemon->ctl_json("locks");
  lock.unlock();
}

}  // namespace
}  // namespace gpumem::testing
