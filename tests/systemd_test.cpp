// gpumemd under systemd: the protocols of daemon/systemd/ against sockets of the test, the
// passed fds read in a forked child (they live at fixed fd numbers), and the daemon under the
// test supervisor: socket activation, restarts that refuse no client, the watchdog, the fd
// store.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "support/daemon_process.hpp"
#include "support/notify_receiver.hpp"
#include "support/systemd_supervisor.hpp"
#include "systemd/activation.hpp"
#include "systemd/notify.hpp"
#include "systemd/watchdog.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
namespace systemd = daemon::systemd;

/// Runs @p body in a forked child, where it may place fds and set the environment freely;
/// what it returns (empty: all held) comes back here.
std::string in_child(const std::function<std::string()>& body) {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return "pipe2 failed";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(ends[0]);
    const std::string failure = body();
    // The body may have placed its own fds over ends[1]: an empty result is not written.
    if (!failure.empty() && ::write(ends[1], failure.data(), failure.size()) < 0) ::_exit(1);
    ::_exit(0);
  }
  ::close(ends[1]);
  std::string failure;
  char chunk[256];
  for (ssize_t got; (got = ::read(ends[0], chunk, sizeof chunk)) > 0;) {
    failure.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(ends[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failure += " (the child died)";
  return failure;
}

/// Places a fresh pipe's read end at each of fds 3 .. 3+count-1 of this (child) process.
void place_pipes(int count) {
  for (int fd = 3; fd < 3 + count; ++fd) {
    int ends[2];
    if (::pipe(ends) != 0) ::_exit(1);
    const int high_read = ::fcntl(ends[0], F_DUPFD, 100);
    ::close(ends[0]);
    ::close(ends[1]);
    ::dup2(high_read, fd);  // not close-on-exec, as systemd passes them
    ::close(high_read);
  }
}

bool close_on_exec(int fd) {
  return (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
}

std::string pid_text() {
  return std::to_string(::getpid());
}

TEST(PassedFds, AreTakenByNameFromFdThreeCloseOnExecAndTheVariablesUnset) {
  EXPECT_EQ(in_child([] {
              place_pipes(2);
              ::setenv("LISTEN_PID", pid_text().c_str(), 1);
              ::setenv("LISTEN_FDS", "2", 1);
              ::setenv("LISTEN_FDNAMES", "listen:pool-0", 1);
              const auto passed = systemd::take_passed_fds();
              if (passed.size() != 2) return std::string("not two fds");
              if (passed[0].name != "listen" || passed[1].name != "pool-0")
                return std::string("names");
              if (passed[0].fd.get() != 3 || passed[1].fd.get() != 4) return std::string("numbers");
              if (!close_on_exec(3) || !close_on_exec(4)) return std::string("not close-on-exec");
              for (const char* key : {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"}) {
                if (std::getenv(key) != nullptr) return std::string(key) + " still set";
              }
              return std::string();
            }),
            "");
}

TEST(PassedFds, WithoutNamesAreUnknown) {
  EXPECT_EQ(in_child([] {
              place_pipes(3);
              ::setenv("LISTEN_PID", pid_text().c_str(), 1);
              ::setenv("LISTEN_FDS", "3", 1);
              ::setenv("LISTEN_FDNAMES", "listen::", 1);
              auto passed = systemd::take_passed_fds();
              if (passed.size() != 3 || passed[0].name != "listen" || passed[1].name != "unknown" ||
                  passed[2].name != "unknown") {
                return std::string("names with empty entries");
              }
              place_pipes(1);
              ::setenv("LISTEN_PID", pid_text().c_str(), 1);
              ::setenv("LISTEN_FDS", "1", 1);
              passed = systemd::take_passed_fds();
              if (passed.size() != 1 || passed[0].name != "unknown") return std::string("no names");
              return std::string();
            }),
            "");
}

TEST(PassedFds, MeantForAnotherProcessAreLeftAlone) {
  EXPECT_EQ(in_child([] {
              place_pipes(1);
              ::setenv("LISTEN_PID", std::to_string(::getppid()).c_str(), 1);
              ::setenv("LISTEN_FDS", "1", 1);
              if (!systemd::take_passed_fds().empty()) return std::string("took another's fds");
              if (::fcntl(3, F_GETFD) != 0) return std::string("fd 3 was touched");
              if (std::getenv("LISTEN_FDS") != nullptr) return std::string("LISTEN_FDS still set");
              return std::string();
            }),
            "");
}

TEST(PassedFds, MalformedVariablesGiveNone) {
  EXPECT_EQ(in_child([] {
              place_pipes(1);
              for (const auto& [pid, count] : std::vector<std::pair<std::string, std::string>>{
                       {"12x", "1"}, {pid_text(), "one"}, {pid_text(), "-1"}, {pid_text(), "5"}}) {
                ::setenv("LISTEN_PID", pid.c_str(), 1);
                ::setenv("LISTEN_FDS", count.c_str(), 1);
                if (!systemd::take_passed_fds().empty()) {
                  return "took fds with LISTEN_PID=" + pid + " LISTEN_FDS=" + count;
                }
              }
              ::setenv("LISTEN_PID", pid_text().c_str(), 1);
              ::setenv("LISTEN_FDS", "0", 1);
              if (!systemd::take_passed_fds().empty()) return std::string("LISTEN_FDS=0");
              return std::string();
            }),
            "");
}

TEST(Watchdog, IntervalComesFromWatchdogUsecWhenMeantForThisProcess) {
  EXPECT_EQ(in_child([] {
              ::unsetenv("WATCHDOG_USEC");
              ::unsetenv("WATCHDOG_PID");
              if (systemd::watchdog_interval()) return std::string("without WATCHDOG_USEC");
              ::setenv("WATCHDOG_USEC", "200000", 1);
              if (systemd::watchdog_interval() != 200ms) return std::string("200000");
              ::setenv("WATCHDOG_PID", pid_text().c_str(), 1);
              if (systemd::watchdog_interval() != 200ms) return std::string("our WATCHDOG_PID");
              ::setenv("WATCHDOG_PID", std::to_string(::getppid()).c_str(), 1);
              if (systemd::watchdog_interval()) return std::string("another's WATCHDOG_PID");
              ::unsetenv("WATCHDOG_PID");
              ::setenv("WATCHDOG_USEC", "soon", 1);
              if (systemd::watchdog_interval()) return std::string("malformed");
              return std::string();
            }),
            "");
}

TEST(Notify, WithoutNotifySocketNothingIsSent) {
  ::unsetenv("NOTIFY_SOCKET");
  EXPECT_FALSE(systemd::notify_socket_set());
  EXPECT_FALSE(systemd::notify("READY=1"));
  const int fds[] = {0};
  EXPECT_EQ(systemd::notify_with_fds("FDSTORE=1", fds), std::errc::not_supported);
  EXPECT_EQ(systemd::barrier(100ms), std::errc::not_supported);
}

TEST(Notify, SendsStateWithFdsAndCredentials) {
  notify_receiver systemd_side("gpumem-notify-test");
  ASSERT_TRUE(systemd::notify_socket_set());
  int first[2];
  int second[2];
  ASSERT_EQ(::pipe2(first, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(second, O_CLOEXEC), 0);
  const unique_fd first_read(first[0]), first_write(first[1]);
  const unique_fd second_read(second[0]), second_write(second[1]);
  const int fds[] = {first_write.get(), second_write.get()};
  ASSERT_FALSE(systemd::notify_with_fds("FDSTORE=1\nFDNAME=pool-0", fds));

  const auto got = systemd_side.receive();
  EXPECT_EQ(got.text, "FDSTORE=1\nFDNAME=pool-0");
  EXPECT_EQ(got.sender, ::getpid());
  ASSERT_EQ(got.fds.size(), 2u);
  // The received fds write into the pipes that were sent, in order.
  ASSERT_EQ(::write(got.fds[0].get(), "a", 1), 1);
  ASSERT_EQ(::write(got.fds[1].get(), "b", 1), 1);
  char byte = 0;
  ASSERT_EQ(::read(first_read.get(), &byte, 1), 1);
  EXPECT_EQ(byte, 'a');
  ASSERT_EQ(::read(second_read.get(), &byte, 1), 1);
  EXPECT_EQ(byte, 'b');

  EXPECT_TRUE(systemd::notify("WATCHDOG=1"));
  EXPECT_EQ(systemd_side.receive().text, "WATCHDOG=1");
  const std::vector<int> too_many(254, first_write.get());
  EXPECT_EQ(systemd::notify_with_fds("FDSTORE=1", too_many), std::errc::invalid_argument);
}

TEST(Notify, BarrierReturnsOnceSystemdClosedItsFd) {
  notify_receiver systemd_side("gpumem-barrier-test");
  std::thread slow_systemd([&systemd_side] {
    auto got = systemd_side.receive();
    EXPECT_EQ(got.text, "BARRIER=1");
    EXPECT_EQ(got.fds.size(), 1u);
    std::this_thread::sleep_for(200ms);  // still processing earlier messages
  });                                    // got.fds close here
  const auto started = clock_type::now();
  EXPECT_FALSE(systemd::barrier(5s));
  EXPECT_GE(clock_type::now() - started, 150ms);
  slow_systemd.join();
}

TEST(Notify, BarrierTimesOutWhileSystemdKeepsItsFd) {
  notify_receiver systemd_side("gpumem-barrier-timeout-test");
  const auto started = clock_type::now();
  EXPECT_EQ(systemd::barrier(100ms), std::errc::timed_out);  // queued, never received
  EXPECT_GE(clock_type::now() - started, 100ms);
}

bool is_socket(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && S_ISSOCK(info.st_mode);
}

TEST(SocketActivation, GpumemdServesOnThePassedSocketAndSaysItIsReady) {
  systemd_supervisor systemd_side({});
  systemd_side.start();
  EXPECT_EQ(systemd_side.status(), "accepting clients");
  auto client = systemd_side.connect();
  client.ping();
  const auto buffer = client.allocate(4096, {.name = "activated"});
  EXPECT_EQ(systemd_side.connect("second").open("activated").size(), 4096u);
}

TEST(SocketActivation, AClientConnectingWhileGpumemdIsDownIsServedAfterTheRestart) {
  systemd_supervisor systemd_side({});
  systemd_side.start();
  systemd_side.kill(SIGKILL);
  ASSERT_FALSE(systemd_side.running());
  constexpr auto kDown = 300ms;
  std::thread restarter([&systemd_side, kDown] {
    std::this_thread::sleep_for(kDown);
    systemd_side.start();
  });
  const auto started = clock_type::now();
  // Waits in the socket's backlog: with nothing listening it would be refused at once.
  auto client = systemd_side.connect("waited");
  client.ping();
  EXPECT_GE(clock_type::now() - started, kDown - 50ms);
  restarter.join();
}

TEST(SocketActivation, TheSocketFileOutlivesAStopAndServesTheNextStart) {
  systemd_supervisor systemd_side({});
  systemd_side.start();
  const int status = systemd_side.kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(is_socket(systemd_side.socket_path()));
  systemd_side.start();
  systemd_side.connect().ping();
}

TEST(SocketActivation, RestartsLeakNoFdsInTheDaemon) {
  systemd_supervisor systemd_side({});
  systemd_side.start();
  // A client of this (live) process that never calls again: every restarted daemon keeps its
  // session for it to resume, so every count below includes it the same way.
  auto kept = systemd_side.connect();
  kept.ping();
  systemd_side.restart();
  const std::size_t at_first = systemd_side.open_fd_count();
  for (int round = 0; round < 10; ++round) systemd_side.restart();
  // Polled: a notification's socket is open for a moment after each send.
  EXPECT_TRUE(systemd_side.wait_for([&] { return systemd_side.open_fd_count() <= at_first; },
                                    std::chrono::seconds(1)))
      << systemd_side.open_fd_count() << " fds open, " << at_first << " after the first restart";
}

TEST(SocketActivation, WithoutAPassedSocketGpumemdBindsAndRemovesItsOwn) {
  systemd_supervisor systemd_side({.socket_activation = false});
  EXPECT_FALSE(is_socket(systemd_side.socket_path()));
  systemd_side.start();
  EXPECT_TRUE(is_socket(systemd_side.socket_path()));
  systemd_side.connect().ping();
  systemd_side.kill(SIGTERM);
  EXPECT_FALSE(is_socket(systemd_side.socket_path()));
}

TEST(SocketActivation, APassedSocketThatDoesNotListenIsRefusedClearly) {
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  const std::string binary = daemon_binary();
  const std::string unused_path =
      (std::filesystem::temp_directory_path() / ("gpumemd-unused-" + pid_text() + ".sock"))
          .string();
  const pid_t child = ::fork();
  if (child == 0) {
    // What a unit with ListenDatagram= instead of ListenStream= would pass.
    const int datagram = ::socket(AF_UNIX, SOCK_DGRAM, 0);
    ::dup2(datagram, 3);
    ::dup2(ends[1], STDERR_FILENO);
    ::setenv("LISTEN_PID", pid_text().c_str(), 1);  // exec keeps the pid
    ::setenv("LISTEN_FDS", "1", 1);
    ::setenv("LISTEN_FDNAMES", "listen", 1);
    ::execl(binary.c_str(), binary.c_str(), "--socket", unused_path.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(ends[1]);
  std::string log;
  char chunk[512];
  for (ssize_t got; (got = ::read(ends[0], chunk, sizeof chunk)) > 0;) {
    log.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(ends[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_NE(log.find("is not a listening Unix stream socket"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(unused_path));
}

TEST(SocketActivation, PlainGpumemdStillBindsItsOwnSocket) {
  daemon_process plain;
  plain.connect().ping();
  EXPECT_TRUE(is_socket(plain.socket_path()));
}

TEST(Watchdog, GpumemdPingsTwicePerInterval) {
  systemd_supervisor systemd_side({.watchdog = 200ms});
  systemd_side.start();
  const unsigned at_start = systemd_side.watchdog_pings();
  std::this_thread::sleep_for(1s);
  // Every 100 ms: about ten in a second; a loaded machine may lose a few.
  EXPECT_GE(systemd_side.watchdog_pings() - at_start, 5u);
}

TEST(Watchdog, WithoutWatchdogUsecGpumemdDoesNotPing) {
  systemd_supervisor systemd_side({});
  systemd_side.start();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(systemd_side.watchdog_pings(), 0u);
}

systemd_supervisor::options notify_peer(std::vector<std::string> args) {
  return {.args = std::move(args), .socket_activation = false, .binary = GPUMEM_TEST_NOTIFY_PEER};
}

TEST(Supervisor, KeepsStoredFdsByNameAndPassesThemBackInOrder) {
  systemd_supervisor systemd_side(notify_peer({"store:a", "store:b", "store:a"}));
  systemd_side.start();
  EXPECT_EQ(systemd_side.status(), "passed");
  EXPECT_EQ(systemd_side.stored_names(), (std::vector<std::string>{"a", "b", "a"}));

  // The restarted process gets the same open files (storing them again adds nothing), and
  // FDSTOREREMOVE=1 drops every fd of its name; the barrier waits for all of it.
  systemd_side.set_args({"store-again:a", "remove:b", "barrier"});
  systemd_side.restart();
  EXPECT_EQ(systemd_side.status(), "passed a=a b=b a=a");
  EXPECT_EQ(systemd_side.stored_names(), (std::vector<std::string>{"a", "a"}));

  systemd_side.set_args({});
  systemd_side.restart(SIGTERM);
  EXPECT_EQ(systemd_side.status(), "passed a=a a=a");
}

TEST(Supervisor, DropsDuplicatesOthersMessagesAndFdsBeyondTheMaximum) {
  auto settings =
      notify_peer({"store-twice:twice", "store-from-child:child", "store:c", "store:d"});
  settings.fd_store_max = 2;
  systemd_supervisor systemd_side(settings);
  systemd_side.start();
  EXPECT_EQ(systemd_side.stored_names(), (std::vector<std::string>{"twice", "c"}));
}

TEST(Supervisor, KeepsFdsStoredJustBeforeASigkill) {
  systemd_supervisor systemd_side(notify_peer({"store:last"}));
  systemd_side.start();
  systemd_side.kill(SIGKILL);
  EXPECT_EQ(systemd_side.stored_count(), 1u);
  systemd_side.set_args({});
  systemd_side.start();
  EXPECT_EQ(systemd_side.status(), "passed last=last");
}

TEST(Supervisor, ReportsADaemonThatExitsBeforeReady) {
  systemd_supervisor systemd_side(notify_peer({"no-such-command"}));
  EXPECT_THROW(systemd_side.start(), std::runtime_error);
  EXPECT_FALSE(systemd_side.running());
}

}  // namespace
}  // namespace gpumem::testing
