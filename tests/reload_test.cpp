// SIGHUP reloads gpumemd's configuration: a real daemon under the test's stand-in for systemd,
// its file rewritten between signals, each change checked from outside (a client's requests,
// the socket file's mode, the log) and the notifications systemd would see.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gpumem/reservation.hpp"
#include "support/daemon_process.hpp"
#include "support/metric_value.hpp"
#include "support/systemd_supervisor.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

/// gpumemd under the stand-in for systemd, reading a configuration file this test rewrites.
/// Nothing but --config on its command line, whose options would win over the file's keys.
class Reload : public ::testing::Test {
 protected:
  void start(const std::string& text, bool socket_activation = true) {
    systemd.emplace(systemd_supervisor::options{.socket_activation = socket_activation,
                                                .binary = daemon_binary()});
    config = systemd->socket_path() + ".yaml";
    write(text);
    systemd->set_args({"--config", config});
    systemd->start();
  }
  /// Writes @p text as the file, with the supervisor's socket unless it names another.
  void write(const std::string& text) const {
    std::ofstream file(config);
    if (text.find("socket:") == std::string::npos)
      file << "socket: " << systemd->socket_path() << "\n";
    file << text;
  }
  /// Sends SIGHUP and waits until the daemon has said READY=1 after RELOADING=1 once more.
  void reload() {
    const std::size_t before = readiness_after_reloads();
    ::kill(systemd->pid(), SIGHUP);
    ASSERT_TRUE(systemd->wait_for([&] { return readiness_after_reloads() > before; }, 10s))
        << systemd->log_tail();
  }
  /// READY=1 messages that followed a RELOADING=1.
  std::size_t readiness_after_reloads() const {
    std::size_t count = 0;
    bool reloading = false;
    for (const auto& message : systemd->notifications()) {
      if (message.find("RELOADING=1") != std::string::npos) reloading = true;
      if (reloading && message.find("READY=1") != std::string::npos) {
        ++count;
        reloading = false;
      }
    }
    return count;
  }
  std::string log() const { return systemd->log_tail(100000); }

  std::optional<systemd_supervisor> systemd;
  std::string config;
};

constexpr const char* kTwoAllocations = "log_level: info\nquotas:\n  default: {allocations: 2}\n";

TEST_F(Reload, ALoweredQuotaRefusesTheNextAllocationAndTheClientKeepsWhatItHas) {
  start("log_level: info\nquotas:\n  default: {allocations: 3}\n");
  auto client = systemd->connect();
  auto first = client.allocate(4096);
  auto second = client.allocate(4096, {.name = "kept"});
  write("log_level: info\nquotas:\n  default: {allocations: 1}\n");
  reload();
  try {
    client.allocate(4096);
    ADD_FAILURE() << "an allocation over the lowered quota was granted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::quota_exceeded) << error.what();
  }
  // Nothing already granted is taken back.
  EXPECT_EQ(systemd->connect("other").open("kept").size(), 4096u);
  EXPECT_EQ(client.allocations().size(), 2u);
  EXPECT_NE(log().find("SIGHUP: configuration reloaded: quotas"), std::string::npos) << log();
}

TEST_F(Reload, ANewPoolAppearsInStatsAndServesAllocations) {
  start("log_level: info\n");
  auto client = systemd->connect();
  write(
      "log_level: info\npools:\n  - {name: host, device: host, size: 1GiB}\n"
      "  - {name: staging, device: host, size: 64MiB}\n");
  reload();
  const auto pools = client.stats().pools;
  ASSERT_TRUE(std::ranges::any_of(pools, [](const PoolStats& p) { return p.name == "staging"; }))
      << log();
  const auto buffer = client.allocate(1 << 20, {.pool = "staging"});
  EXPECT_EQ(buffer.size(), 1u << 20);
  EXPECT_NE(log().find("pool 'staging' added"), std::string::npos) << log();
}

TEST_F(Reload, ALoweredSleepMemoryKeptLetsTheKeptCopiesGo) {
  start("log_level: info\nsleep_memory_kept: 64MiB\n");
  auto client = systemd->connect();
  auto weights = Reservation::create(client, 8 << 20, {.device = kHost, .initial = 4 << 20});
  std::memset(weights.data(), 7, 4 << 20);
  weights.sleep();
  weights.wake();
  EXPECT_EQ(metric_value(client.metrics(), "gpumemd_sleep_memory_kept_bytes"), 4 << 20) << log();
  EXPECT_EQ(static_cast<const char*>(weights.data())[(4 << 20) - 1], 7);
  write("log_level: info\nsleep_memory_kept: 1MiB\n");
  reload();
  EXPECT_EQ(metric_value(client.metrics(), "gpumemd_sleep_memory_kept_bytes"), 0) << log();
  EXPECT_NE(log().find("sleep_memory_kept 67108864 -> 1048576"), std::string::npos) << log();
  EXPECT_NE(log().find("its kept host copy goes"), std::string::npos) << log();
  weights.sleep();
  weights.wake();
  EXPECT_EQ(static_cast<const char*>(weights.data())[0], 7);
  EXPECT_EQ(metric_value(client.metrics(), "gpumemd_sleep_memory_kept_bytes"), 0)
      << "4 MiB are over the lowered limit";
}

TEST_F(Reload, TheSocketModeChangesOnTheSocketFileGpumemdMade) {
  start("log_level: info\nsocket_mode: \"0600\"\n", /*socket_activation=*/false);
  struct stat before {};
  ASSERT_EQ(::stat(systemd->socket_path().c_str(), &before), 0);
  EXPECT_EQ(before.st_mode & 0777, 0600u);
  write("log_level: info\nsocket_mode: \"0660\"\n");
  reload();
  struct stat after {};
  ASSERT_EQ(::stat(systemd->socket_path().c_str(), &after), 0);
  EXPECT_EQ(after.st_mode & 0777, 0660u);
  EXPECT_NE(log().find("socket_mode 0600 -> 0660"), std::string::npos) << log();
}

TEST_F(Reload, TheModeOfSystemdsSocketIsLeftToSystemdAndSaidSo) {
  start("log_level: info\n");
  struct stat before {};
  ASSERT_EQ(::stat(systemd->socket_path().c_str(), &before), 0);
  write("log_level: info\nsocket_mode: \"0666\"\n");
  reload();
  struct stat after {};
  ASSERT_EQ(::stat(systemd->socket_path().c_str(), &after), 0);
  EXPECT_EQ(after.st_mode & 0777, before.st_mode & 0777);
  EXPECT_NE(log().find("was made by systemd's socket unit, whose SocketMode= sets its mode"),
            std::string::npos)
      << log();
  EXPECT_NE(log().find("SIGHUP: configuration reloaded: nothing changed"), std::string::npos)
      << log();
}

TEST_F(Reload, WhatCannotChangeLiveIsReportedAtWarningWithTheKeyAndTheReason) {
  start("log_level: info\n");
  write(
      "log_level: info\nsocket: /tmp/elsewhere.sock\n"
      "pools:\n  - {name: host, device: host, size: 2GiB}\n");
  reload();
  const std::string text = log();
  EXPECT_NE(text.find("[warning] reload: socket: '" + systemd->socket_path() +
                      "' -> '/tmp/elsewhere.sock' cannot change while gpumemd runs"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[warning] reload: pools: pool 'host' (size 1073741824 -> 2147483648,"),
            std::string::npos)
      << text;
  systemd->connect().ping();
}

TEST_F(Reload, ALogLevelRaisedToDebugShowsDebugLines) {
  start("log_level: info\n");
  systemd->connect().ping();
  EXPECT_EQ(log().find("[debug]"), std::string::npos) << log();
  write("log_level: debug\n");
  reload();
  systemd->connect("after").ping();
  EXPECT_TRUE(
      systemd->wait_for([&] { return log().find("[debug] client") != std::string::npos; }, 5s))
      << log();
  EXPECT_NE(log().find("log_level info -> debug"), std::string::npos) << log();
}

TEST_F(Reload, ABadFileIsLoggedAndTheDaemonServesOnUnderTheOldConfiguration) {
  start(kTwoAllocations);
  {
    auto client = systemd->connect();
    auto first = client.allocate(4096);
    write("log_level: info\nquotas:\n  default: {allocations: 1}\nmax_output_bytes: 0\n");
    reload();
    EXPECT_NE(log().find("[error] SIGHUP: configuration not reloaded, the previous one stays in "
                         "force: " +
                         config + ": max_output_bytes: 0 is below the minimum"),
              std::string::npos)
        << log();
    // The old quota of two still holds: the lowered one in the bad file was not taken.
    auto second = client.allocate(4096);
    systemd->connect("after").ping();
  }
  const int status = systemd->kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(Reload, SystemdIsToldReloadingWithTheClockAndThenReady) {
  start("log_level: info\n");
  const std::size_t before = systemd->notifications().size();
  reload();
  const auto all = systemd->notifications();
  std::vector<std::string> sent(all.begin() + static_cast<std::ptrdiff_t>(before), all.end());
  ASSERT_GE(sent.size(), 2u);
  const std::string& reloading = sent.front();
  EXPECT_NE(reloading.find("RELOADING=1\n"), std::string::npos) << reloading;
  const auto clock_at = reloading.find("MONOTONIC_USEC=");
  ASSERT_NE(clock_at, std::string::npos) << reloading;
  // CLOCK_MONOTONIC in microseconds, taken when the signal was handled: before this read.
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const auto sent_usec = std::stoull(reloading.substr(clock_at + 15));
  const auto now_usec = std::uint64_t(now.tv_sec) * 1000000 + std::uint64_t(now.tv_nsec) / 1000;
  EXPECT_LE(sent_usec, now_usec);
  EXPECT_GT(sent_usec + 10'000'000, now_usec);
  EXPECT_NE(sent.back().find("READY=1"), std::string::npos) << sent.back();
  EXPECT_NE(log().find("SIGHUP: configuration reloaded: nothing changed"), std::string::npos)
      << log();
}

}  // namespace
}  // namespace gpumem::testing
