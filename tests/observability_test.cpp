// What operators watch, against a real gpumemd: `gpumemctl metrics` checked by promtool and
// against what happened (a SIGKILLed lock holder), the event stream (deaths in order, a reader
// that never reads), who sees which series and events, and the HTTP endpoint.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/events.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/gpumemctl_process.hpp"
#include "support/temporary_file.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr std::uint64_t kHeld = 1 << 20;
constexpr run_as kNobody{65534, 65534};

child_process peer(const daemon_process& daemon, const std::vector<std::string>& args) {
  std::vector<std::string> argv{peer_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return child_process(argv, {daemon.socket_env()});
}

/// The value of the series @p series ("name" or "name{labels}") in Prometheus text.
std::optional<std::uint64_t> value_of(const std::string& text, const std::string& series) {
  const std::string start = "\n" + series + " ";
  const std::size_t at = ("\n" + text).find(start);
  if (at == std::string::npos) return std::nullopt;
  std::uint64_t value = 0;
  const char* first = text.data() + at + start.size() - 1;
  std::from_chars(first, text.data() + text.size(), value);
  return value;
}

bool has_promtool() {
  return std::system("command -v promtool >/dev/null 2>&1") == 0;
}

/// promtool's verdict on @p text: its output and exit code (0: the text is valid and lint-free).
std::pair<std::string, int> promtool_check(const std::string& text) {
  const std::string path = ::testing::TempDir() + "gpumemd-metrics-" + std::to_string(::getpid());
  std::ofstream(path) << text;
  child_process check({"/bin/sh", "-c", "promtool check metrics < " + path}, {},
                      {.stderr_to_stdout = true, .user = std::nullopt});
  std::string said;
  while (const auto line = check.read_line(30s)) said += *line + "\n";
  const auto status = check.wait(30s);
  std::filesystem::remove(path);
  return {said, status ? exit_code(*status) : -1};
}

/// The metrics once @p ready holds for them, or the last ones after a few seconds.
std::string metrics_when(Client& client, const std::function<bool(const std::string&)>& ready) {
  const auto deadline = clock_type::now() + 10s;
  std::string text = client.metrics();
  while (!ready(text) && clock_type::now() < deadline) {
    std::this_thread::sleep_for(10ms);
    text = client.metrics();
  }
  return text;
}

/// A configuration file: the keys given, the rest default.
temporary_file config_file(std::string_view yaml) {
  return temporary_file("gpumemd-observability", yaml);
}

TEST(Metrics, PromtoolAcceptsThemAndTheyCountAKilledLockHoldersDeathAndMemory) {
  daemon_process daemon;
  auto client = daemon.connect("watcher");
  auto holder = peer(daemon, {"lock-hold-with", "jobs", std::to_string(kHeld)});
  ASSERT_EQ(holder.read_line(30s), "held");
  client.allocate(4096).release();
  EXPECT_THROW(client.open("nothing-by-this-name"), Error);
  holder.signal(SIGKILL);
  holder.wait();

  const std::string text = metrics_when(client, [](const std::string& now) {
    return value_of(now, "gpumemd_departures_total{how=\"died\"}") == 1u;
  });
  EXPECT_EQ(value_of(text, "gpumemd_departures_total{how=\"died\"}"), 1u) << text;
  EXPECT_EQ(value_of(text, "gpumemd_lock_owner_deaths_total"), 1u);
  EXPECT_EQ(value_of(text, "gpumemd_reclaimed_bytes_total"), kHeld);
  EXPECT_EQ(value_of(text, "gpumemd_reclaimed_objects_total"), 2u);  // its buffer and its lock
  EXPECT_EQ(value_of(text, "gpumemd_request_errors_total{code=\"not_found\"}"), 1u);
  EXPECT_GE(value_of(text, "gpumemd_request_duration_seconds_count{type=\"allocate\"}"), 2u);
  EXPECT_EQ(value_of(text, "gpumemd_pool_used_bytes{pool=\"host\",device=\"host\"}"), 0u);
  EXPECT_EQ(value_of(text, "gpumemd_objects{kind=\"lock\"}"), 1u);  // kept: its owner died
  EXPECT_TRUE(text.ends_with("# EOF\n"));

  const auto [printed, status] = run_gpumemctl(daemon, {"metrics"});
  ASSERT_EQ(status, 0) << printed;
  EXPECT_NE(printed.find("# TYPE gpumemd_reclaimed_bytes_total counter\n"), std::string::npos);
  if (!has_promtool()) GTEST_SKIP() << "promtool is missing (Debian: prometheus): not checked";
  const auto [verdict, verdict_status] = promtool_check(printed);
  EXPECT_EQ(verdict_status, 0) << verdict << "\n" << printed;
}

TEST(Metrics, APlainUserSeesTheNodeAndOnlyItsOwnUidsSeries) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: it runs gpumemctl as nobody";
  const temporary_file config =
      config_file("socket_mode: \"0666\"\naccess:\n  connect_users: [65534]\n");
  daemon_process daemon({"--config", config.path()});
  ASSERT_EQ(::chmod(daemon.folder().c_str(), 0755), 0);
  auto root_client = daemon.connect("root-job");
  auto held = root_client.allocate(8192, {.name = "roots"});

  const auto [mine, status] = run_gpumemctl(daemon, {"metrics"}, kNobody);
  ASSERT_EQ(status, 0) << mine;
  EXPECT_EQ(value_of(mine, "gpumemd_uid_connections{uid=\"65534\"}"), 1u) << mine;
  EXPECT_EQ(mine.find("uid=\"0\""), std::string::npos) << mine;
  EXPECT_EQ(mine.find("root-job"), std::string::npos) << mine;
  EXPECT_EQ(value_of(mine, "gpumemd_pool_used_bytes{pool=\"host\",device=\"host\"}"), 8192u);

  const std::string all = root_client.metrics();
  EXPECT_EQ(value_of(all, "gpumemd_uid_owned_bytes{uid=\"0\",memory=\"host\"}"), 8192u) << all;
  EXPECT_EQ(value_of(all, "gpumemd_label_clients{label=\"root-job\"}"), 1u);
}

/// Events from @p stream until one for which @p last holds, or nothing more comes within 10 s.
std::vector<Event> events_until(EventStream& stream,
                                const std::function<bool(const Event&)>& last) {
  std::vector<Event> seen;
  while (auto event = stream.next(10s)) {
    seen.push_back(*event);
    if (last(*event)) break;
  }
  return seen;
}

TEST(Events, ADeathIsToldWithItsOwnerDiedHandOffAndWhatWasReclaimedInOrder) {
  daemon_process daemon;
  auto stream = EventStream::open({.socket_path = daemon.socket_path()});
  EXPECT_TRUE(stream.every_uid());  // root
  auto holder = peer(daemon, {"lock-hold-with", "jobs", std::to_string(kHeld)});
  ASSERT_EQ(holder.read_line(30s), "held");
  const auto pid = static_cast<std::uint32_t>(holder.pid());
  holder.signal(SIGKILL);
  holder.wait();

  const auto seen = events_until(
      stream, [&](const Event& e) { return e.kind == EventKind::reclaimed && e.pid == pid; });
  std::vector<Event> about_it;
  for (const Event& e : seen) {
    if (e.pid == pid) about_it.push_back(e);
  }
  ASSERT_EQ(about_it.size(), 4u) << seen.size() << " events, none about pid " << pid;
  EXPECT_EQ(about_it[0].kind, EventKind::connected);
  EXPECT_EQ(about_it[1].kind, EventKind::died);
  EXPECT_EQ(about_it[2].kind, EventKind::owner_died);
  EXPECT_EQ(about_it[2].object, "jobs");
  EXPECT_EQ(about_it[2].client, about_it[1].client);
  EXPECT_EQ(about_it[3].kind, EventKind::reclaimed);
  EXPECT_EQ(about_it[3].bytes, kHeld);
  EXPECT_EQ(about_it[3].count, 2u);
  for (std::size_t i = 1; i < about_it.size(); ++i) {
    EXPECT_GT(about_it[i].sequence, about_it[i - 1].sequence);
  }
}

TEST(Events, AClientThatClosesIsDisconnectedEvenIfItExitedBeforeTheDaemonReadTheClose) {
  daemon_process daemon;
  auto stream = EventStream::open({.socket_path = daemon.socket_path()});
  for (const bool closes : {true, false}) {
    int ready[2];
    int go[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(go), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::optional<Client> client = Client::connect(
          {.socket_path = daemon.socket_path(), .label = closes ? "closes" : "only-exits"});
      client->ping();
      char byte = 'r';
      if (::write(ready[1], &byte, 1) != 1 || ::read(go[0], &byte, 1) != 1) ::_exit(2);
      if (closes) client.reset();  // the library closes; else the exit closes the socket
      ::_exit(0);
    }
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    // The daemon reads the close only after the process has gone, whichever way it closed.
    ASSERT_EQ(::kill(daemon.pid(), SIGSTOP), 0);
    ASSERT_EQ(::write(go[1], &byte, 1), 1);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_EQ(::kill(daemon.pid(), SIGCONT), 0);
    for (const int end : {ready[0], ready[1], go[0], go[1]}) ::close(end);
    const auto pid = static_cast<std::uint32_t>(child);
    const auto seen = events_until(stream, [&](const Event& e) {
      return e.pid == pid && (e.kind == EventKind::died || e.kind == EventKind::disconnected);
    });
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back().pid, pid);
    EXPECT_EQ(seen.back().kind, closes ? EventKind::disconnected : EventKind::died)
        << seen.back().label;
  }
}

TEST(Events, ASubscriberThatNeverReadsStallsNobodyAndLearnsWhatItLost) {
  daemon_process daemon;
  auto stream = EventStream::open({.socket_path = daemon.socket_path()});
  // Two events per connection: three times what the stream's queue (128) and socket held on
  // Debian 12's default socket buffers, where 200 connections were the fewest that lost events.
  constexpr int kConnections = 600;
  const auto started = clock_type::now();
  for (int i = 0; i < kConnections; ++i) daemon.connect("churn").ping();
  const auto took = clock_type::now() - started;
  EXPECT_LT(took, 30s) << "the unread stream slowed everyone down";
  auto client = daemon.connect("after");
  const auto allocate_started = clock_type::now();
  client.allocate(4096).release();
  EXPECT_LT(clock_type::now() - allocate_started, 1s);

  // Reading now: what was queued, then the marker; an event after it comes in order.
  std::uint64_t received = 0;
  std::uint64_t lost = 0;
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  bool marker_seen = false;
  bool event_after_marker = false;
  const auto read_all = [&] {
    while (auto event = stream.next(2s)) {
      if (event->kind == EventKind::lost) {
        lost += event->count;
        marker_seen = true;
        continue;
      }
      ++received;
      if (first == 0) first = event->sequence;
      last = event->sequence;
      event_after_marker = event_after_marker || marker_seen;
    }
  };
  read_all();
  EXPECT_GT(lost, 0u);
  EXPECT_FALSE(event_after_marker);
  daemon.connect("later").ping();
  read_all();
  EXPECT_TRUE(event_after_marker);
  EXPECT_EQ(received + lost, last - first + 1) << "an event vanished without being counted";
  EXPECT_EQ(value_of(client.metrics(), "gpumemd_events_lost_total"), lost);
}

TEST(Events, AUserSeesOnlyEventsAboutItsOwnUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: it runs gpumemctl as nobody";
  const temporary_file config =
      config_file("socket_mode: \"0666\"\naccess:\n  connect_users: [65534]\n");
  daemon_process daemon({"--config", config.path()});
  ASSERT_EQ(::chmod(daemon.folder().c_str(), 0755), 0);
  child_process events({GPUMEM_TEST_CTL, "--socket", daemon.socket_path(), "events", "--json"}, {},
                       {.stderr_to_stdout = false, .user = kNobody});
  // Its own connections came before it subscribed: nobody's pings show when the stream is on.
  std::optional<std::string> first;
  for (int attempt = 0; attempt < 30 && !first; ++attempt) {
    ASSERT_EQ(run_gpumemctl(daemon, {"ping"}, kNobody).second, 0);
    first = events.read_line(1s);
  }
  ASSERT_TRUE(first.has_value()) << "gpumemctl events printed nothing";
  EXPECT_NE(first->find("\"uid\":65534"), std::string::npos) << *first;
  for (const char* absent :
       {"\"error\":null", "\"request\":null", "\"object\":null", "\"reason\":null"}) {
    EXPECT_NE(first->find(absent), std::string::npos) << "a connect event: " << *first;
  }
  while (events.read_line(500ms)) {
  }
  daemon.connect("root-job").ping();
  const auto [said, status] = run_gpumemctl(daemon, {"ping"}, kNobody);
  ASSERT_EQ(status, 0) << said;
  for (int lines = 0; lines < 2; ++lines) {  // the ping's connect and disconnect
    const auto line = events.read_line(10s);
    ASSERT_TRUE(line.has_value());
    EXPECT_NE(line->find("\"uid\":65534"), std::string::npos) << *line;
    EXPECT_EQ(line->find("root-job"), std::string::npos) << *line;
  }
}

#ifdef GPUMEM_WITH_PROMETHEUS
/// A TCP port nobody listens on right now.
std::uint16_t free_port() {
  unique_fd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (::bind(probe.get(), reinterpret_cast<sockaddr*>(&address), size) != 0 ||
      ::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    throw std::runtime_error("no free port");
  }
  return ntohs(address.sin_port);
}

/// The body of GET @p path from 127.0.0.1:@p port; empty when it cannot be fetched.
std::string http_get(std::uint16_t port, const std::string& path) {
  unique_fd socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    return {};
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (::send(socket.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return {};
  }
  std::string response;
  char buffer[4096];
  for (ssize_t got; (got = ::recv(socket.get(), buffer, sizeof buffer, 0)) > 0;) {
    response.append(buffer, static_cast<std::size_t>(got));
  }
  const std::size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : response.substr(body + 4);
}

TEST(MetricsOverHttp, TheEndpointServesWhatPromtoolAccepts) {
  const std::uint16_t port = free_port();
  const temporary_file config =
      config_file("metrics_listen: \"127.0.0.1:" + std::to_string(port) + "\"\n");
  daemon_process daemon({"--config", config.path()});
  auto client = daemon.connect("scraped");
  auto held = client.allocate(8192);
  std::string body;
  const auto deadline = clock_type::now() + 10s;
  while (body.empty() && clock_type::now() < deadline) {
    body = http_get(port, "/metrics");
    if (body.empty()) std::this_thread::sleep_for(20ms);
  }
  ASSERT_FALSE(body.empty()) << "nothing served on 127.0.0.1:" << port;
  EXPECT_EQ(value_of(body, "gpumemd_pool_used_bytes{pool=\"host\",device=\"host\"}"), 8192u)
      << body;
  EXPECT_EQ(value_of(body, "gpumemd_label_clients{label=\"scraped\"}"), 1u) << body;
  if (!has_promtool()) GTEST_SKIP() << "promtool is missing (Debian: prometheus): not checked";
  const auto [verdict, status] = promtool_check(body);
  EXPECT_EQ(status, 0) << verdict << "\n" << body;
}
#endif

TEST(MetricsOverHttp, AListenAddressThisDaemonCannotServeIsAConfigurationError) {
  const auto check = [](const std::string& address) {
    const temporary_file config = config_file("metrics_listen: \"" + address + "\"\n");
    child_process checking({daemon_binary(), "--check-config", "--config", config.path()}, {},
                           {.stderr_to_stdout = true, .user = std::nullopt});
    std::string said;
    while (const auto line = checking.read_line(10s)) said += *line + "\n";
    const auto status = checking.wait();
    return std::pair{said, status ? exit_code(*status) : -1};
  };
#ifdef GPUMEM_WITH_PROMETHEUS
  const auto [said, status] = check("9464");
  EXPECT_NE(said.find("is not HOST:PORT"), std::string::npos) << said;
#else
  const auto [said, status] = check("127.0.0.1:9464");
  EXPECT_NE(said.find("without prometheus-cpp"), std::string::npos) << said;
#endif
  EXPECT_EQ(status, 2) << said;
  EXPECT_NE(said.find("metrics_listen"), std::string::npos) << said;
}

}  // namespace
}  // namespace gpumem::testing
