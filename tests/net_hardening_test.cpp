// Black-box tests of what one client can make gpumemd spend (descriptors, CPU, memory, the
// event loop), of its signals, of who may own its socket, and of client timeouts: a real
// gpumemd per test, raw sockets playing the hostile or careless client.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gpumem/events.hpp"
#include "gpumem/gpumem.h"
#include "gpumem/gpumem.hpp"
#include "gpumem/proto/codec.hpp"
#include "gpumem/shared/socket_path.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/sanitizer.hpp"
#include "support/scoped_env.hpp"
#include "support/temporary_file.hpp"
#include "support/temporary_folder.hpp"
#include "support/unix_address.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr uid_t kNobody = 65534;

unique_fd raw_connect(const std::string& path) {
  unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_un address = unix_address(path);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0)
      << std::strerror(errno);
  return fd;
}

void send_all(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent <= 0) return;  // the daemon or the test hung up: the test checks what it needs
    bytes = bytes.subspan(static_cast<std::size_t>(sent));
  }
}

void append_request(std::vector<std::byte>& stream, proto::message_type type, std::uint32_t id) {
  if (type == proto::message_type::hello) {
    proto::append_frame(stream, static_cast<std::uint16_t>(type), id,
                        proto::hello_request{proto::kProtocolVersion, 0, {}, 0, {}});
  } else if (type == proto::message_type::list_allocations) {
    proto::append_frame(stream, static_cast<std::uint16_t>(type), id, proto::list_request{0});
  } else {
    proto::append_frame(stream, static_cast<std::uint16_t>(type), id, proto::empty_payload{});
  }
}

std::vector<std::byte> hello_frame() {
  std::vector<std::byte> frame;
  append_request(frame, proto::message_type::hello, 1);
  return frame;
}

/// True when the daemon closes @p fd within @p within (whatever it sent before).
bool closed_within(int fd, std::chrono::milliseconds within) {
  const auto deadline = clock_type::now() + within;
  while (clock_type::now() < deadline) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, 10) <= 0) continue;
    std::byte chunk[4096];
    if (::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT) == 0) return true;
  }
  return false;
}

gpumem::testing::temporary_file write_config(const std::string& text) {
  return gpumem::testing::temporary_file("gpumemd-net", text);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

/// Resident memory of a process, in KiB.
std::size_t rss_kib(pid_t pid) {
  std::istringstream status(read_file("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmRSS:")) return std::stoul(line.substr(6));
  }
  return 0;
}

/// CPU time a process has used, user and system, in clock ticks.
long cpu_ticks(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string skip;
  for (int field = 3; field < 14; ++field) fields >> skip;  // state ... cmajflt
  long user = 0;
  long system = 0;
  fields >> user >> system;
  return user + system;
}

/// gpumemd with its log (at info) in a file, which the tests read.
struct shell_daemon {
  shell_daemon()
      : folder(make_temporary_folder("net")),
        socket(folder + "/gpumemd.sock"),
        log(folder + "/gpumemd.log"),
        process(
            {"/bin/sh", "-c",
             "exec " + daemon_binary() + " --socket " + socket + " --log-level info 2>" + log}) {
    const auto deadline = clock_type::now() + 20s;
    for (;;) {
      try {
        connect().ping();
        return;
      } catch (const Error&) {
        if (const auto ended = process.wait(0ms)) {
          throw std::runtime_error("gpumemd exited with " + std::to_string(exit_code(*ended)) +
                                   " before it served: " + log_text());
        }
        if (clock_type::now() > deadline) {
          throw std::runtime_error("gpumemd did not start: " + log_text());
        }
        std::this_thread::sleep_for(5ms);
      }
    }
  }
  /// Lowers the running daemon's descriptor limit to what it has open now and @p more: set at
  /// its start instead, the limit would have to fit what the CUDA driver opens there, which
  /// grows with the node's GPUs (two H200s did not start within 64).
  void limit_descriptors_to_open_and(rlim_t more) const {
    rlimit limit{};
    ASSERT_EQ(::prlimit(process.pid(), RLIMIT_NOFILE, nullptr, &limit), 0) << strerror(errno);
    limit.rlim_cur = open_fd_count(process.pid()) + more;
    ASSERT_EQ(::prlimit(process.pid(), RLIMIT_NOFILE, &limit, nullptr), 0) << strerror(errno);
  }
  ~shell_daemon() {
    process.signal(SIGTERM);
    process.wait(20s);
    std::error_code ignored;
    std::filesystem::remove_all(folder, ignored);
  }
  Client connect() const { return Client::connect({.socket_path = socket}); }
  std::string log_text() const { return read_file(log); }

  std::string folder;
  std::string socket;
  std::string log;
  child_process process;
};

std::uint32_t client_count(Client& client) {
  return static_cast<std::uint32_t>(client.clients().size());
}

/// Waits until the daemon counts @p expected clients (sessions end and start asynchronously).
bool wait_for_clients(Client& client, std::uint32_t expected, std::chrono::seconds within = 10s) {
  const auto deadline = clock_type::now() + within;
  while (clock_type::now() < deadline) {
    if (client_count(client) == expected) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

/// @p count connections that each said hello (their replies left unread).
std::vector<unique_fd> crowd_of(const std::string& socket, std::size_t count) {
  const auto hello = hello_frame();
  std::vector<unique_fd> crowd;
  for (std::size_t i = 0; i < count; ++i) {
    crowd.push_back(raw_connect(socket));
    send_all(crowd.back().get(), hello);
  }
  return crowd;
}

TEST(NetHardening, AtTheDescriptorLimitAcceptingPausesInsteadOfSpinning) {
  shell_daemon daemon;
  // Each session takes two descriptors (socket and pidfd): 32 more run out well before 120.
  daemon.limit_descriptors_to_open_and(32);
  std::vector<unique_fd> crowd;
  for (int i = 0; i < 120; ++i) crowd.push_back(raw_connect(daemon.socket));
  std::this_thread::sleep_for(300ms);
  const auto failures_before = count_of(daemon.log_text(), "accept failed");
  EXPECT_GE(failures_before, 1u) << daemon.log_text();
  const long ticks_before = cpu_ticks(daemon.process.pid());
  std::this_thread::sleep_for(1s);
  const long ticks = cpu_ticks(daemon.process.pid()) - ticks_before;
  EXPECT_LT(ticks, ::sysconf(_SC_CLK_TCK) / 5) << "the daemon spun at the descriptor limit";
  EXPECT_LE(count_of(daemon.log_text(), "accept failed") - failures_before, 1u)
      << "one line per attempt";
  crowd.clear();
  const auto deadline = clock_type::now() + 5s;
  for (;;) {  // descriptors free again: the daemon serves new clients
    try {
      daemon.connect().ping();
      break;
    } catch (const Error& error) {
      ASSERT_LT(clock_type::now(), deadline) << error.what();
      std::this_thread::sleep_for(10ms);
    }
  }
}

// open_sync's page only spares the client a request: where the daemon cannot copy it, the open
// stands without it, and the client that then cannot get the page closes what it opened instead
// of being told of a failure while the daemon holds the lock for it.
TEST(NetHardening, AtTheDescriptorLimitAnOpenThatFailsLeavesNothingOpen) {
  shell_daemon daemon;
  daemon.limit_descriptors_to_open_and(32);
  auto steady = daemon.connect();
  auto own = steady.lock("own");  // its slot and own page, while descriptors are free
  auto other = daemon.connect();
  auto on_the_page = other.lock("group.held", {.mode = 0660});  // the page exists
  std::vector<unique_fd> crowd;
  for (int i = 0; i < 120; ++i) crowd.push_back(raw_connect(daemon.socket));
  const auto deadline = clock_type::now() + 5s;
  while (count_of(daemon.log_text(), "accept failed") == 0) {
    ASSERT_LT(clock_type::now(), deadline) << "the daemon never ran out of descriptors";
    std::this_thread::sleep_for(10ms);
  }
  try {
    steady.lock("group", {.mode = 0660});
    FAIL() << "the page of a new lock went out with no descriptor left";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::internal) << error.what();
    EXPECT_NE(std::string(error.what()).find("dup"), std::string::npos) << error.what();
  }
  crowd.clear();
  for (const auto& each : steady.sync_objects()) {
    EXPECT_NE(each.name, "group") << "the lock the client was told it did not get is still open";
  }
}

TEST(NetHardening, AConnectionBeyondMaxConnectionsIsToldWhyAndClosed) {
  const auto config = write_config("max_connections: 8\n");
  daemon_process daemon({"--config", config.path()});
  auto steady = daemon.connect();
  ASSERT_TRUE(wait_for_clients(steady, 1));
  // Connections that never say hello: those beyond the 8 are closed once their hello is
  // overdue (1 s), without holding anyone up meanwhile.
  auto crowd = crowd_of(daemon.socket_path(), 12);
  steady.ping();
  std::this_thread::sleep_for(1500ms);  // past the hello's second, once for all of them
  std::size_t closed = 0;
  for (const auto& fd : crowd) closed += closed_within(fd.get(), 200ms) ? 1 : 0;
  EXPECT_EQ(closed, 12u - 7u) << "8 connections, the steady client's among them, stay open";
  try {
    Client::connect({.socket_path = daemon.socket_path()});
    ADD_FAILURE() << "a 9th connection was served";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::quota_exceeded) << error.what();
    EXPECT_NE(std::string(error.what()).find("at most 8 connections at once (max_connections)"),
              std::string::npos)
        << error.what();
  }
  steady.ping();
  crowd.clear();
  ASSERT_TRUE(wait_for_clients(steady, 1));
  daemon.connect().ping();
}

// A connection counts against its uid's quota from its accept: those that never say hello are
// held to it too, told why and closed, instead of taking places that max_connections shares
// among every user (a uid that connect_users does not name is refused there too:
// Tenants.AUserTheConnectPolicyDoesNotNameIsTurnedAway), and the refusal is an event.
TEST(NetHardening, ConnectionsThatNeverSayHelloAreHeldToTheirUidsQuota) {
  const auto config = write_config("quotas:\n  default:\n    connections: 4\n");
  daemon_process daemon({"--config", config.path()});
  auto steady = daemon.connect();
  ASSERT_TRUE(wait_for_clients(steady, 1));  // the start's probe connection gone
  auto events = EventStream::open({.socket_path = daemon.socket_path()});
  std::vector<unique_fd> crowd;
  for (int i = 0; i < 12; ++i) crowd.push_back(raw_connect(daemon.socket_path()));
  std::this_thread::sleep_for(1500ms);  // past the refusal's second for a hello
  std::size_t closed = 0;
  for (const auto& fd : crowd) closed += closed_within(fd.get(), 200ms) ? 1 : 0;
  EXPECT_EQ(closed, 12u - 2u) << "the uid's quota of 4, the steady client and events among them";
  bool told = false;
  while (const auto event = events.next(500ms)) {
    told = told || (event->kind == EventKind::refused && event->request == "hello" &&
                    event->code == errc::quota_exceeded);
  }
  EXPECT_TRUE(told) << "a connection refused at its accept is no refused event";
  try {
    Client::connect({.socket_path = daemon.socket_path()});
    ADD_FAILURE() << "a connection past the uid's quota was served";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::quota_exceeded) << error.what();
    EXPECT_NE(std::string(error.what()).find("connections"), std::string::npos) << error.what();
  }
  steady.ping();
  crowd.clear();
  ASSERT_TRUE(wait_for_clients(steady, 2));
  daemon.connect().ping();
}

TEST(NetHardening, APipelinedFloodOfListRequestsIsHeldBackNotBuffered) {
  daemon_process daemon;
  auto owner = daemon.connect();
  // Enough allocations that each list reply is a full 64 KiB page.
  std::vector<Buffer> buffers;
  for (int i = 0; i < 700; ++i) buffers.push_back(owner.allocate(4096));
  auto steady = daemon.connect();
  const std::size_t rss_before = rss_kib(daemon.pid());

  constexpr std::uint32_t kRequests = 3000;  // 190 MiB of replies if they were all built
  std::vector<std::byte> flood = hello_frame();
  for (std::uint32_t i = 0; i < kRequests; ++i) {
    append_request(flood, proto::message_type::list_allocations, i + 2);
  }
  auto fd = raw_connect(daemon.socket_path());
  std::thread flooder([&] { send_all(fd.get(), flood); });

  std::size_t rss_high = rss_before;
  auto slowest_ping = clock_type::duration::zero();
  for (const auto until = clock_type::now() + 1s; clock_type::now() < until;) {
    const auto start = clock_type::now();
    steady.ping();
    slowest_ping = std::max(slowest_ping, clock_type::now() - start);
    rss_high = std::max(rss_high, rss_kib(daemon.pid()));
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_LT(rss_high - rss_before, 16u * 1024) << "KiB of replies built ahead of the reader";
  std::cout << "during the flood: daemon memory +" << rss_high - rss_before
            << " KiB, slowest ping of another client "
            << std::chrono::duration<double, std::milli>(slowest_ping).count() << " ms\n";
  EXPECT_LT(slowest_ping, 100ms * kSanitizerSlowdown);

  // Once the client reads, every request is answered, in order.
  std::vector<std::byte> in;
  std::size_t replies = 0;
  std::uint32_t last_id = 0;
  const auto deadline = clock_type::now() + 30s;
  while (replies < kRequests + 1 && clock_type::now() < deadline) {
    std::byte chunk[65536];
    const ssize_t got = ::recv(fd.get(), chunk, sizeof chunk, 0);
    ASSERT_GT(got, 0) << "the daemon hung up on a client that reads";
    in.insert(in.end(), chunk, chunk + got);
    std::size_t used = 0;
    for (;;) {
      proto::frame_view frame;
      std::error_code error;
      if (proto::parse_frame(std::span(in).subspan(used), frame, error) !=
          proto::parse_status::complete) {
        break;
      }
      EXPECT_EQ(frame.head.request_id, last_id + 1);
      last_id = frame.head.request_id;
      used += frame.frame_size();
      ++replies;
    }
    in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(used));
  }
  EXPECT_EQ(replies, kRequests + 1);
  flooder.join();
}

TEST(NetHardening, AClientThatNeverStopsSendingLeavesOthersTheirTurn) {
  daemon_process daemon;
  auto steady = daemon.connect();
  // The flooder reads its replies, so backpressure never holds it: only the loop's share per
  // connection and wake-up (session::kFramesPerWakeup) lets the others in.
  auto fd = raw_connect(daemon.socket_path());
  std::vector<std::byte> flood;
  for (std::uint32_t i = 0; i < 2000; ++i) {
    append_request(flood, proto::message_type::ping, i + 2);  // the ids are not checked here
  }
  std::atomic<bool> flooding{true};
  std::thread sender([&] {
    send_all(fd.get(), hello_frame());
    while (flooding) send_all(fd.get(), flood);
  });
  std::thread reader([&] {
    std::byte chunk[65536];
    while (::recv(fd.get(), chunk, sizeof chunk, 0) > 0) {
    }
  });
  std::vector<clock_type::duration> pings;
  for (const auto until = clock_type::now() + 1s; clock_type::now() < until;) {
    const auto start = clock_type::now();
    steady.ping();
    pings.push_back(clock_type::now() - start);
    std::this_thread::sleep_for(2ms);
  }
  flooding = false;
  ::shutdown(fd.get(), SHUT_RDWR);
  sender.join();
  reader.join();
  std::sort(pings.begin(), pings.end());
  const auto median = pings[pings.size() / 2];
  std::cout << "pings of another client during the flood: median "
            << std::chrono::duration<double, std::milli>(median).count() << " ms, slowest "
            << std::chrono::duration<double, std::milli>(pings.back()).count() << " ms\n";
  // Without the share, each wake-up serves the flooder until backpressure holds it (2,730 pings,
  // 64 KiB of replies) before anyone else's turn: a median of 11-15 ms on the 2-core
  // development VM, against 0.1 ms with it.
  EXPECT_LT(median, 5ms * kSanitizerSlowdown);
  EXPECT_LT(pings.back(), 100ms * kSanitizerSlowdown);
}

TEST(NetHardening, AnIdleConnectionCostsLittleMemory) {
  if (kSanitized) {
    GTEST_SKIP() << "a sanitizer's allocator pads every block: the bound holds for the normal "
                    "build, where this test runs";
  }
  daemon_process daemon;
  auto steady = daemon.connect();
  ASSERT_TRUE(wait_for_clients(steady, 1));
  // A first crowd warms the allocator and the tables up to their size.
  crowd_of(daemon.socket_path(), 1000);
  ASSERT_TRUE(wait_for_clients(steady, 1));
  const std::size_t rss_before = rss_kib(daemon.pid());
  auto crowd = crowd_of(daemon.socket_path(), 1000);
  ASSERT_TRUE(wait_for_clients(steady, 1001));
  const double kib_per_connection = double(rss_kib(daemon.pid()) - rss_before) / 1000;
  std::cout << "daemon memory per idle connection: " << kib_per_connection << " KiB\n";
  EXPECT_LT(kib_per_connection, 8.0);
}

TEST(NetHardening, ClosingAThousandConnectionsAtOnceDoesNotStallOthers) {
  daemon_process daemon;
  auto steady = daemon.connect();
  auto crowd = crowd_of(daemon.socket_path(), 1000);
  ASSERT_TRUE(wait_for_clients(steady, 1001));
  std::atomic<bool> done = false;
  auto slowest_ping = clock_type::duration::zero();
  std::thread pinger([&] {
    auto pinging = daemon.connect();
    while (!done) {
      const auto start = clock_type::now();
      pinging.ping();
      slowest_ping = std::max(slowest_ping, clock_type::now() - start);
    }
  });
  std::this_thread::sleep_for(50ms);
  crowd.clear();
  EXPECT_TRUE(wait_for_clients(steady, 2));
  done = true;
  pinger.join();
  std::cout << "slowest ping while 1000 connections closed: "
            << std::chrono::duration<double, std::milli>(slowest_ping).count() << " ms\n";
  // 8-15 ms in the normal build on the 2-core development VM, about the whole closing; 107 ms
  // once in CI's AddressSanitizer build beside other tests.
  EXPECT_LT(slowest_ping, 100ms * kSanitizerSlowdown);
}

TEST(NetHardening, ARequestStalledHalfwayIsClosedAfterTheFrameDeadlineAndIdleOnesStay) {
  const auto config = write_config("frame_deadline: 300ms\n");
  daemon_process daemon({"--config", config.path()});
  auto idle = raw_connect(daemon.socket_path());
  auto stalled = raw_connect(daemon.socket_path());
  const auto hello = hello_frame();
  send_all(stalled.get(), std::span(hello).first(10));
  const auto start = clock_type::now();
  EXPECT_TRUE(closed_within(stalled.get(), 5s));
  EXPECT_GE(clock_type::now() - start, 250ms);
  EXPECT_FALSE(closed_within(idle.get(), 500ms));
  send_all(idle.get(), hello);
  pollfd answered{idle.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&answered, 1, 5000), 1);
  EXPECT_FALSE(closed_within(idle.get(), 100ms));
}

TEST(NetHardening, SighupAndSigusr1AreAnsweredInTheLogAndSigpipeIsIgnored) {
  shell_daemon daemon;
  auto client = daemon.connect();
  for (const int signal : {SIGHUP, SIGUSR1, SIGPIPE}) {
    daemon.process.signal(signal);
    std::this_thread::sleep_for(100ms);
    client.ping();
  }
  daemon.connect().ping();
  const std::string log = daemon.log_text();
  EXPECT_NE(log.find("SIGHUP: configuration reloaded: nothing changed"), std::string::npos) << log;
  EXPECT_NE(log.find("SIGUSR1: 1 connection(s), 1 client(s)"), std::string::npos) << log;
}

TEST(NetHardening, SigquitStopsTheDaemonCleanlyAndRemovesTheSocket) {
  daemon_process daemon;
  // The daemon does not come back: the buffer's release at the end waits for it only briefly.
  auto client = Client::connect({.socket_path = daemon.socket_path(), .reconnect_for = 100ms});
  auto buffer = client.allocate(4096, {.name = "kept"});
  EXPECT_EQ(daemon.stop(SIGQUIT), 0);
  EXPECT_FALSE(std::filesystem::exists(daemon.socket_path()));
}

/// The critical line gpumemd logs when started on @p socket, and its exit code.
std::pair<std::string, int> start_refused(const std::string& socket) {
  child_process daemon(
      {"/bin/sh", "-c",
       "exec " + daemon_binary() + " --log-level critical --socket " + socket + " 2>&1"});
  const auto line = daemon.read_line();
  const auto status = daemon.wait(10s);
  return {line.value_or(""), status ? exit_code(*status) : -1};
}

TEST(NetHardening, EveryFolderTheDaemonMakesForItsSocketIs0700) {
  const std::string folder = make_temporary_folder("net");
  ASSERT_EQ(::chmod(folder.c_str(), 0755), 0);
  const std::string socket = folder + "/new/sub/gpumemd.sock";
  child_process daemon({daemon_binary(), "--log-level", "critical", "--socket", socket});
  // Serving, not only bound: under ThreadSanitizer (GCC 12) a SIGTERM that reaches gpumemd
  // between its bind and its loop is now and then never handled (about 1 run in 30 on the
  // 2-core VM; none in 500 without it), and the stop below would wait in vain.
  ASSERT_TRUE(eventually(
      [&] {
        try {
          Client::connect({.socket_path = socket}).ping();
          return true;
        } catch (const Error&) {
          return false;
        }
      },
      10s));
  for (const std::string& made : {folder + "/new", folder + "/new/sub"}) {
    struct stat status {};
    ASSERT_EQ(::stat(made.c_str(), &status), 0) << made;
    EXPECT_EQ(status.st_mode & 07777, 0700u) << made;
  }
  daemon.signal(SIGTERM);
  EXPECT_TRUE(daemon.wait(10s).has_value());
  std::filesystem::remove_all(folder);
}

TEST(NetHardening, TheDaemonRefusesASocketFolderOthersMayWriteTo) {
  const std::string folder = make_temporary_folder("net");
  ::chmod(folder.c_str(), 0777);
  const auto [line, status] = start_refused(folder + "/gpumemd.sock");
  EXPECT_EQ(status, 1);
  EXPECT_NE(line.find("has mode 0777"), std::string::npos) << line;
  EXPECT_NE(line.find("chmod go-w " + folder), std::string::npos) << line;
  EXPECT_FALSE(std::filesystem::exists(folder + "/gpumemd.sock"));
  std::filesystem::remove_all(folder);
}

TEST(NetHardening, TheDaemonRefusesASocketFolderOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a folder to another uid";
  const std::string folder = make_temporary_folder("net");
  ASSERT_EQ(::chown(folder.c_str(), kNobody, kNobody), 0);
  const auto [line, status] = start_refused(folder + "/gpumemd.sock");
  EXPECT_EQ(status, 1);
  EXPECT_NE(line.find("belongs to uid 65534"), std::string::npos) << line;
  EXPECT_NE(line.find("rm -r " + folder), std::string::npos) << line;
  std::filesystem::remove_all(folder);
}

// Without $GPUMEM_SOCKET a user's client looks at its own path first, under /tmp for most: one
// that another user made first is passed over for the system daemon's socket, not connected to
// and refused.
TEST(NetHardening, AClientPassesOverASocketOfAnotherUserAtItsOwnPathForTheSystemDaemons) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a folder to another uid";
  const std::string system_folder = make_temporary_folder("system");
  const std::string squatted_folder = make_temporary_folder("own");
  const auto bound = [](const std::string& path) {
    unique_fd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_un address = unix_address(path);
    EXPECT_EQ(::bind(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    return socket;
  };
  const std::string system = system_folder + "/gpumemd.sock";
  const std::string own = squatted_folder + "/gpumemd.sock";
  const auto system_socket = bound(system);
  const auto own_socket = bound(own);
  EXPECT_EQ(client_socket_among(own, system), own) << "a socket of root's own was passed over";
  ASSERT_EQ(::chown(squatted_folder.c_str(), kNobody, kNobody), 0);
  EXPECT_EQ(client_socket_among(own, system), system);
  EXPECT_EQ(client_socket_among(own, system_folder + "/none.sock"), own)
      << "with no system daemon, connecting is what says why the own socket is refused";
  std::filesystem::remove_all(system_folder);
  std::filesystem::remove_all(squatted_folder);
}

TEST(NetHardening, AClientRefusesASocketOfAnUnexpectedOwner) {
  daemon_process daemon;
  const auto refusal = [&](const ConnectOptions& options) -> std::string {
    try {
      Client::connect(options);
    } catch (const Error& error) {
      EXPECT_EQ(error.status(), errc::permission_denied) << error.what();
      return error.what();
    }
    return "(connected)";
  };
  if (::geteuid() == 0) {
    // Root trusts root and itself: hand the socket file, then its folder, to nobody.
    ASSERT_EQ(::chown(daemon.socket_path().c_str(), kNobody, kNobody), 0);
    const std::string file_refused = refusal({.socket_path = daemon.socket_path()});
    EXPECT_NE(file_refused.find(daemon.socket_path()), std::string::npos) << file_refused;
    EXPECT_NE(file_refused.find("its file belongs to uid 65534"), std::string::npos)
        << file_refused;
    EXPECT_NE(file_refused.find("must belong to root"), std::string::npos) << file_refused;
    // Told that the daemon runs as nobody, the client accepts the file; the listener is root.
    Client::connect({.socket_path = daemon.socket_path(), .daemon_uid = kNobody}).ping();
    {
      const scoped_env nobody("GPUMEM_DAEMON_UID", "65534");
      Client::connect({.socket_path = daemon.socket_path()}).ping();
    }
    ASSERT_EQ(::chown(daemon.socket_path().c_str(), 0, 0), 0);
    ASSERT_EQ(::chown(daemon.folder().c_str(), kNobody, kNobody), 0);
    const std::string folder_refused = refusal({.socket_path = daemon.socket_path()});
    EXPECT_NE(folder_refused.find("its folder " + daemon.folder() + " belongs to uid 65534"),
              std::string::npos)
        << folder_refused;
    ASSERT_EQ(::chown(daemon.folder().c_str(), 0, 0), 0);
  } else {
    // Told that the daemon runs as another uid, the client refuses ours.
    const std::int64_t other = ::geteuid() + 1;
    const std::string refused = refusal({.socket_path = daemon.socket_path(), .daemon_uid = other});
    EXPECT_NE(refused.find(daemon.socket_path()), std::string::npos) << refused;
    EXPECT_NE(refused.find("belongs to uid " + std::to_string(::geteuid())), std::string::npos)
        << refused;
    EXPECT_NE(refused.find("uid " + std::to_string(other)), std::string::npos) << refused;
    const scoped_env another("GPUMEM_DAEMON_UID", std::to_string(other));
    refusal({.socket_path = daemon.socket_path()});
  }
  daemon.connect().ping();
}

/// A socket that accepts connections (into its backlog) and never answers.
struct silent_server {
  silent_server() : folder(make_temporary_folder("net")), path(folder + "/silent.sock") {
    listener.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.c_str(), path.size());
    EXPECT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(listener.get(), 16), 0);
  }
  ~silent_server() { std::filesystem::remove_all(folder); }

  std::string folder;
  std::string path;
  unique_fd listener;
};

/// The status a connect to @p options fails with, and how long it took.
std::pair<errc, clock_type::duration> failed_connect(const ConnectOptions& options) {
  const auto start = clock_type::now();
  try {
    Client::connect(options);
  } catch (const Error& error) {
    return {error.status(), clock_type::now() - start};
  }
  return {errc::ok, clock_type::now() - start};
}

TEST(NetHardening, ACallToADaemonThatNeverAnswersTimesOut) {
  silent_server silent;
  const auto [status, took] = failed_connect({.socket_path = silent.path, .timeout = 300ms});
  EXPECT_EQ(status, errc::timed_out);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 2s);

  const auto [env_status, env_took] = [&] {
    const scoped_env short_timeout("GPUMEM_TIMEOUT_MS", "200");
    return failed_connect({.socket_path = silent.path});
  }();
  EXPECT_EQ(env_status, errc::timed_out);
  EXPECT_LT(env_took, 2s);

  gpumem_connect_options options{};
  options.socket_path = silent.path.c_str();
  options.timeout_ms = 200;
  gpumem_client* client = nullptr;
  EXPECT_EQ(gpumem_connect_with(&options, &client), GPUMEM_TIMED_OUT);
  EXPECT_NE(std::string(gpumem_last_error()).find("did not answer within 200 ms"),
            std::string::npos)
      << gpumem_last_error();
  EXPECT_EQ(gpumem_status_string(GPUMEM_TIMED_OUT), std::string("timed out"));
}

// A timeout the clock cannot hold (strtoll's overflow included) would make every deadline wrong:
// it is refused before any connect.
TEST(NetHardening, ATimeoutOutOfRangeInTheEnvironmentIsRefused) {
  for (const char* bad : {"0", "-5", "1000000000001", "99999999999999999999999"}) {
    const scoped_env set("GPUMEM_TIMEOUT_MS", bad);
    try {
      Client::connect({.socket_path = "/nonexistent/gpumemd.sock"});
      ADD_FAILURE() << "GPUMEM_TIMEOUT_MS=" << bad << " was taken";
    } catch (const Error& error) {
      EXPECT_EQ(error.status(), errc::invalid_argument) << error.what();
      EXPECT_NE(std::string(error.what()).find(std::string("$GPUMEM_TIMEOUT_MS is '") + bad),
                std::string::npos)
          << error.what();
    }
  }
}

TEST(NetHardening, ATimeoutOutOfRangeInTheOptionsIsRefused) {
  constexpr auto kTooLong = std::chrono::milliseconds(1'000'000'000'001);
  for (const ConnectOptions& options :
       {ConnectOptions{.socket_path = "/nonexistent/gpumemd.sock", .timeout = kTooLong},
        ConnectOptions{.socket_path = "/nonexistent/gpumemd.sock", .reconnect_for = kTooLong}}) {
    try {
      Client::connect(options);
      ADD_FAILURE() << "a timeout of " << kTooLong.count() << " ms was taken";
    } catch (const Error& error) {
      EXPECT_EQ(error.status(), errc::invalid_argument) << error.what();
      EXPECT_NE(std::string(error.what()).find("ms, more than the most"), std::string::npos)
          << error.what();
    }
  }
}

TEST(NetHardening, AStoppedDaemonFailsACallAfterTheTimeoutAndTheClientStaysOutOfStep) {
  daemon_process daemon;
  auto client = Client::connect({.socket_path = daemon.socket_path(), .timeout = 300ms});
  client.ping();
  ::kill(daemon.pid(), SIGSTOP);
  const auto start = clock_type::now();
  try {
    client.ping();
    ADD_FAILURE() << "a stopped daemon answered";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::timed_out) << error.what();
  }
  EXPECT_LT(clock_type::now() - start, 2s);
  ::kill(daemon.pid(), SIGCONT);
  try {
    client.ping();
    ADD_FAILURE() << "a client whose reply went missing went on";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::timed_out) << error.what();
    EXPECT_NE(std::string(error.what()).find("connect again"), std::string::npos);
  }
  daemon.connect().ping();
}

}  // namespace
}  // namespace gpumem::testing
