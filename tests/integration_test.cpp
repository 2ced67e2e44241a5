// Black-box tests: a real gpumemd per test, real client processes, real signals.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include "gpumem/gpumem.h"
#include "gpumem/gpumem.hpp"
#include "gpumem/proto/codec.hpp"
#include "gpumem/shared/fd_passing.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/feature_hiding_proxy.hpp"
#include "support/pattern.hpp"
#include "support/temporary_file.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

child_process peer(const daemon_process& daemon, const std::vector<std::string>& args) {
  std::vector<std::string> argv{peer_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return child_process(argv, {daemon.socket_env()});
}

/// Reads "ready N" from a peer and returns N.
std::uint64_t ready(child_process& process) {
  const auto line = process.read_line();
  EXPECT_TRUE(line && line->starts_with("ready ")) << (line ? *line : "(no line)");
  return line && line->starts_with("ready ") ? std::stoull(line->substr(6)) : 0;
}

std::uint64_t host_in_use(gpumem::Client& client) {
  return client.stats().pools.at(0).bytes_in_use;
}

unique_fd raw_connect(const std::string& path) {
  unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size());
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  return fd;
}

void send_all(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent <= 0) return;  // the daemon may hang up part-way: that is what some tests expect
    bytes = bytes.subspan(static_cast<std::size_t>(sent));
  }
}

/// Everything the daemon sends until it closes the connection (or 5 s pass).
std::vector<std::byte> read_until_closed(int fd) {
  std::vector<std::byte> all;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd ready_fd{fd, POLLIN, 0};
    if (::poll(&ready_fd, 1, 100) <= 0) continue;
    std::byte chunk[4096];
    const ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
    if (got <= 0) return all;
    all.insert(all.end(), chunk, chunk + got);
  }
  ADD_FAILURE() << "the daemon did not close the connection";
  return all;
}

proto::errc first_error_code(const std::vector<std::byte>& stream) {
  proto::frame_view frame;
  std::error_code error;
  if (proto::parse_frame(stream, frame, error) != proto::parse_status::complete) {
    return proto::errc::ok;
  }
  proto::error_reply reply{};
  if (frame.head.type != static_cast<std::uint16_t>(proto::message_type::error) ||
      proto::decode_payload(frame.payload, reply)) {
    return proto::errc::ok;
  }
  return static_cast<proto::errc>(reply.code);
}

std::vector<std::byte> hello_frame() {
  std::vector<std::byte> frame;
  proto::append_frame(frame, static_cast<std::uint16_t>(proto::message_type::hello), 1,
                      proto::hello_request{proto::kProtocolVersion, 0, {}, 0, {}});
  return frame;
}

gpumem::testing::temporary_file write_config(const std::string& text) {
  return gpumem::testing::temporary_file("gpumemd-it", text);
}

TEST(Integration, TwoProcessesShareANamedBuffer) {
  daemon_process daemon;
  auto writer = peer(daemon, {"hold-new", "frames", "1048576", "5"});
  ready(writer);
  auto reader = peer(daemon, {"verify", "frames", "1048576", "5"});
  EXPECT_EQ(reader.read_line(), "ok");
  const auto status = reader.wait();
  ASSERT_TRUE(status);
  EXPECT_EQ(exit_code(*status), 0);
}

TEST(Integration, AKilledClientsBuffersReturnToThePoolWithinOneSecond) {
  daemon_process daemon;
  auto watcher = daemon.connect();
  const auto baseline = host_in_use(watcher);
  auto holder = peer(daemon, {"hold-new", "-", "3000000", "1"});
  ready(holder);
  auto named = peer(daemon, {"hold-new", "named-victim", "5000", "2"});
  ready(named);
  EXPECT_EQ(host_in_use(watcher), baseline + 3005000);
  holder.signal(SIGKILL);
  named.signal(SIGKILL);
  EXPECT_TRUE(daemon.wait_for_bytes_in_use(baseline, 1s));
  EXPECT_THROW(watcher.open("named-victim"), gpumem::Error);
}

TEST(Integration, ABufferOpenedByASecondClientSurvivesItsOwnersDeath) {
  daemon_process daemon;
  auto survivor = daemon.connect();
  const auto baseline = host_in_use(survivor);
  auto owner = peer(daemon, {"hold-new", "keep", "65536", "9"});
  const auto id = ready(owner);
  auto kept = survivor.open("keep");
  EXPECT_EQ(kept.id(), id);
  owner.signal(SIGKILL);
  owner.wait();
  // Wait until the daemon has seen the death, then check the bytes are still there.
  for (auto deadline = std::chrono::steady_clock::now() + 1s;
       survivor.allocations().at(0).owner_client != 0;) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(first_mismatch(kept.data(), kept.size(), 9), kept.size());
  auto late_reader = peer(daemon, {"verify", "keep", "65536", "9"});
  EXPECT_EQ(late_reader.read_line(), "ok");
  EXPECT_EQ(exit_code(*late_reader.wait()), 0);
  EXPECT_EQ(host_in_use(survivor), baseline + 65536);
  kept.release();
  EXPECT_TRUE(daemon.wait_for_bytes_in_use(baseline, 1s));
}

TEST(Integration, GarbageOnTheSocketIsRejectedWithoutDisturbingAWellBehavedClient) {
  daemon_process daemon;
  std::atomic<bool> done{false};
  std::atomic<int> completed{0};
  std::string failure;
  std::thread well_behaved([&] {
    try {
      auto client = daemon.connect("steady");
      while (!done) {
        auto buffer = client.allocate(4096, {.name = "steady-buffer"});
        std::memset(buffer.data(), 0x5a, buffer.size());
        auto again = client.open("steady-buffer");
        if (static_cast<unsigned char*>(again.data())[4095] != 0x5a)
          throw std::runtime_error("bytes");
        client.ping();
        ++completed;
      }
    } catch (const std::exception& error) {
      failure = error.what();
    }
  });
  std::mt19937 random(1);
  const auto garbage_streams = [&] {
    std::vector<std::vector<std::byte>> streams;
    std::vector<std::byte> noise(3000);
    for (auto& b : noise) b = static_cast<std::byte>(random());
    streams.push_back(noise);
    auto bad_magic = hello_frame();
    bad_magic[0] = std::byte{0};
    streams.push_back(bad_magic);
    auto huge = hello_frame();
    reinterpret_cast<proto::header*>(huge.data())->payload_size = 0x7fffffff;
    streams.push_back(huge);
    auto bad_version = hello_frame();
    reinterpret_cast<proto::header*>(bad_version.data())->version = 99;
    streams.push_back(bad_version);
    return streams;
  }();
  for (int round = 0; round < 20; ++round) {
    for (const auto& stream : garbage_streams) {
      auto fd = raw_connect(daemon.socket_path());
      send_all(fd.get(), stream);
      const auto answer = read_until_closed(fd.get());
      EXPECT_NE(first_error_code(answer), proto::errc::ok);
    }
  }
  // A well-framed request with a bad payload is answered and the session goes on.
  auto fd = raw_connect(daemon.socket_path());
  auto frames = hello_frame();
  proto::append_frame(frames, static_cast<std::uint16_t>(proto::message_type::ping), 2,
                      proto::release_request{1, 0, 0, {}});  // ping takes no payload
  send_all(fd.get(), frames);
  ::shutdown(fd.get(), SHUT_WR);
  const auto answer = read_until_closed(fd.get());
  proto::frame_view first;
  std::error_code error;
  ASSERT_EQ(proto::parse_frame(answer, first, error), proto::parse_status::complete);
  EXPECT_EQ(first.head.type, proto::reply_type(proto::message_type::hello));
  EXPECT_EQ(first_error_code(
                {answer.begin() + static_cast<std::ptrdiff_t>(first.frame_size()), answer.end()}),
            proto::errc::bad_message);
  std::this_thread::sleep_for(50ms);
  done = true;
  well_behaved.join();
  EXPECT_EQ(failure, "");
  EXPECT_GT(completed.load(), 0);
  EXPECT_EQ(daemon.connect().stats().pools.at(0).bytes_in_use, 0u);
}

TEST(Integration, AForkedChildHoldingTheSocketDoesNotKeepADeadParentsLeases) {
  daemon_process daemon;
  auto watcher = daemon.connect();
  const auto baseline = host_in_use(watcher);
  auto parent = peer(daemon, {"fork-holder", "2097152"});
  const auto child_pid = static_cast<pid_t>(ready(parent));
  ASSERT_GT(child_pid, 0);
  EXPECT_EQ(host_in_use(watcher), baseline + 2097152);
  parent.signal(SIGKILL);
  parent.wait();
  EXPECT_TRUE(daemon.wait_for_bytes_in_use(baseline, 1s));
  EXPECT_EQ(::kill(child_pid, 0), 0) << "the child that keeps the socket is still alive";
  ::kill(child_pid, SIGKILL);
}

TEST(Integration, AStoppedClientIsNotDeclaredDead) {
  daemon_process daemon;
  auto watcher = daemon.connect();
  auto holder = peer(daemon, {"hold-new", "paused", "8192", "3"});
  ready(holder);
  holder.signal(SIGSTOP);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(host_in_use(watcher), 8192u);
  EXPECT_EQ(watcher.clients().size(), 2u);
  holder.signal(SIGCONT);
  holder.signal(SIGKILL);
  EXPECT_TRUE(daemon.wait_for_bytes_in_use(0, 1s));
}

TEST(Integration, AClientSendingDescriptorsIsDisconnectedAndNothingLeaks) {
  daemon_process daemon;
  auto watcher = daemon.connect();
  // The daemon lets go of its copies of the mailbox's descriptors once they went out, which may
  // be after the watcher read them: a round trip later, it has.
  watcher.ping();
  const auto fds_before = daemon.open_fd_count();
  for (int round = 0; round < 10; ++round) {
    auto fd = raw_connect(daemon.socket_path());
    const auto frame = hello_frame();
    const int smuggled[3] = {0, 1, 2};
    std::error_code error;
    send_with_fds(fd.get(), frame, smuggled, error);
    ASSERT_FALSE(error);
    EXPECT_EQ(first_error_code(read_until_closed(fd.get())), proto::errc::unexpected_handle);
  }
  watcher.ping();
  EXPECT_EQ(daemon.open_fd_count(), fds_before);
}

TEST(Integration, AClientThatNeverReadsIsDisconnectedAndOthersCarryOn) {
  const auto config = write_config("max_output_bytes: 256KiB\n");
  daemon_process daemon({"--config", config.path()});
  auto steady = daemon.connect();
  auto fd = raw_connect(daemon.socket_path());
  const int small = 4096;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  std::vector<std::byte> flood = hello_frame();
  for (std::uint32_t i = 0; i < 100000; ++i) {
    proto::append_frame(flood, static_cast<std::uint16_t>(proto::message_type::ping), i + 2,
                        proto::empty_payload{});
  }
  std::thread flooder([&] { send_all(fd.get(), flood); });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  bool dropped = false;
  while (!dropped && std::chrono::steady_clock::now() < deadline) {
    steady.ping();
    dropped = steady.clients().size() == 1;
    std::this_thread::sleep_for(10ms);
  }
  ::shutdown(fd.get(), SHUT_RDWR);
  flooder.join();
  EXPECT_TRUE(dropped) << "the flooding client was never disconnected";
  steady.ping();
}

TEST(Integration, AnotherUsersNamedBufferNeedsOpenAcrossUsers) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another uid";
  const auto config = write_config("socket_mode: \"0666\"\n");
  daemon_process daemon({"--config", config.path()});
  ::chmod(daemon.folder().c_str(), 0755);
  auto owner = daemon.connect();
  auto buffer = owner.allocate(4096, {.name = "roots-own"});
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    try {
      auto stranger = gpumem::Client::connect({.socket_path = daemon.socket_path()});
      stranger.open("roots-own");
      ::_exit(11);
    } catch (const gpumem::Error& error) {
      ::_exit(error.status() == gpumem::errc::permission_denied ? 0 : 12);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(exit_code(status), 0);
}

TEST(Integration, AReadOnlyOpenerCannotWrite) {
  daemon_process daemon;
  auto owner = daemon.connect();
  auto buffer = owner.allocate(4096, {.name = "ro"});
  auto reader = daemon.connect();
  auto view = reader.open("ro", {.access = gpumem::Access::read_only});
  EXPECT_EQ(view.access(), gpumem::Access::read_only);
  // The kernel refuses to store into the mapping: read() into it fails with EFAULT instead of
  // faulting, which keeps the check free of signals (and of sanitizers' SEGV handlers).
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  ASSERT_EQ(::write(pipe_fds[1], "x", 1), 1);
  errno = 0;
  EXPECT_EQ(::read(pipe_fds[0], view.data(), 1), -1);
  EXPECT_EQ(errno, EFAULT);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  EXPECT_EQ(static_cast<const char*>(view.data())[0], 0) << "reading is allowed";
}

TEST(Integration, BadRequestsGetClearErrorsAndLoseNothing) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto kept = client.allocate(4096, {.name = "kept"});
  const auto expect_error = [&](gpumem::errc code, const std::function<void()>& work,
                                const std::string& mentions) {
    try {
      work();
      ADD_FAILURE() << "no error";
    } catch (const gpumem::Error& error) {
      EXPECT_EQ(error.status(), code) << error.what();
      EXPECT_NE(std::string(error.what()).find(mentions), std::string::npos) << error.what();
    }
  };
  expect_error(
      gpumem::errc::out_of_memory, [&] { client.allocate(std::size_t{2} << 30); }, "host");
  expect_error(
      gpumem::errc::already_exists, [&] { client.allocate(1, {.name = "kept"}); }, "kept");
  expect_error(
      gpumem::errc::invalid_name, [&] { client.allocate(1, {.name = "no spaces"}); }, "no spaces");
  expect_error(
      gpumem::errc::invalid_name, [&] { client.open(std::string(64, 'x')); }, "xxx");
  expect_error(
      gpumem::errc::no_such_device, [&] { client.allocate(1, {.device = 7}); }, "cuda:7");
  expect_error(
      gpumem::errc::not_found, [&] { client.open("absent"); }, "absent");
  expect_error(
      gpumem::errc::invalid_argument, [&] { client.allocate(0); }, "0 bytes");
  expect_error(
      gpumem::errc::invalid_argument, [&] { client.allocate(0, {.name = "empty"}); },
      "0 bytes for 'empty'");
  // The address would end at the NUL: it names the daemon's socket, not what was asked for.
  expect_error(
      gpumem::errc::invalid_argument,
      [&] {
        gpumem::Client::connect({.socket_path = daemon.socket_path() + std::string(1, '\0') + "x"});
      },
      "has a NUL byte at");
  EXPECT_EQ(host_in_use(client), 4096u);
  EXPECT_EQ(client.open("kept").id(), kept.id());
}

TEST(Integration, TheCApiAllocatesOpensAndReleases) {
  daemon_process daemon;
  gpumem_client* writer = nullptr;
  gpumem_client* reader = nullptr;
  ASSERT_EQ(gpumem_connect(daemon.socket_path().c_str(), &writer), GPUMEM_OK);
  ASSERT_EQ(gpumem_connect(daemon.socket_path().c_str(), &reader), GPUMEM_OK);
  gpumem_buffer* written = nullptr;
  ASSERT_EQ(gpumem_allocate(writer, 10000, GPUMEM_HOST, "c-api", &written), GPUMEM_OK);
  fill_pattern(gpumem_buffer_data(written), gpumem_buffer_size(written), 4);
  gpumem_buffer* opened = nullptr;
  ASSERT_EQ(gpumem_open(reader, "c-api", 1, &opened), GPUMEM_OK);
  EXPECT_EQ(gpumem_buffer_id(opened), gpumem_buffer_id(written));
  EXPECT_EQ(first_mismatch(gpumem_buffer_data(opened), 10000, 4), 10000u);
  ASSERT_EQ(gpumem_open_own_objects_only(reader, 1), GPUMEM_OK);
  gpumem_buffer* own = nullptr;  // the writer's uid is the reader's
  ASSERT_EQ(gpumem_open(reader, "c-api", 0, &own), GPUMEM_OK);
  EXPECT_EQ(gpumem_release(own), GPUMEM_OK);
  EXPECT_EQ(gpumem_open_own_objects_only(nullptr, 1), GPUMEM_INVALID_ARGUMENT);
  // A failure leaves the out-parameter as it was, and a later success clears the text.
  gpumem_buffer* missing = written;
  EXPECT_EQ(gpumem_open(reader, "nope", 0, &missing), GPUMEM_NOT_FOUND);
  EXPECT_EQ(missing, written);
  EXPECT_NE(std::string(gpumem_last_error()).find("nope"), std::string::npos);
  EXPECT_STREQ(gpumem_status_string(GPUMEM_NOT_FOUND), "no such object");
  EXPECT_EQ(gpumem_allocate(nullptr, 1, GPUMEM_HOST, nullptr, &missing), GPUMEM_INVALID_ARGUMENT);
  EXPECT_EQ(missing, written);
  gpumem_reservation* reservation = nullptr;
  ASSERT_EQ(gpumem_reserve(writer, 1 << 20, 0, GPUMEM_HOST, nullptr, &reservation), GPUMEM_OK);
  EXPECT_STREQ(gpumem_last_error(), "");
  EXPECT_EQ(gpumem_sleep(reservation, 0, 600001), GPUMEM_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpumem_last_error()).find("600000 ms allowed"), std::string::npos);
  EXPECT_EQ(gpumem_release_reservation(reservation), GPUMEM_OK);
  EXPECT_EQ(gpumem_release(opened), GPUMEM_OK);
  EXPECT_EQ(gpumem_release(written), GPUMEM_OK);
  gpumem_disconnect(reader);
  gpumem_disconnect(writer);
  EXPECT_EQ(daemon.connect().stats().pools.at(0).allocations, 0u);
  gpumem_client* nobody = nullptr;
  EXPECT_EQ(gpumem_connect("/nonexistent/gpumemd.sock", &nobody), GPUMEM_IO_ERROR);
  EXPECT_NE(std::string(gpumem_last_error()).find("/nonexistent/gpumemd.sock"), std::string::npos);
}

// This libgpumem with an earlier gpumemd, which announces none of the later features: requests go
// on the socket (no mailbox), an open asks for its sync page (none comes with it), a channel
// opens with open_sync, so that the daemon checks no opener's slots, as such a daemon did not,
// and an open that asks for the caller's own objects only is refused, not sent as a plain one.
TEST(Integration, AClientOfAnEarlierDaemonUsesWhatThatDaemonHad) {
  daemon_process daemon;
  const feature_hiding_proxy earlier(daemon.socket_path(),
                                     proto::kFeatureMailbox | proto::kFeatureSendsSyncPage |
                                         proto::kFeatureChannelLayout | proto::kFeatureOwnOnly);
  auto client = Client::connect({.socket_path = earlier.socket_path()});
  auto direct = daemon.connect();
  const std::size_t before = earlier.bytes_from_clients();
  for (int i = 0; i < 10; ++i) client.ping();
  EXPECT_GE(earlier.bytes_from_clients() - before, 10 * sizeof(proto::header))
      << "the client asked through a mailbox that the daemon did not announce";

  auto written = client.allocate(8192, {.device = kHost, .name = "earlier", .mode = 0600});
  fill_pattern(written.data(), written.size(), 6);
  EXPECT_EQ(first_mismatch(direct.open("earlier").data(), 8192, 6), 8192u);
  try {
    client.open_own_objects_only();
    ADD_FAILURE() << "own objects only, from a daemon that did not say it honours it";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::not_supported) << error.what();
    EXPECT_NE(std::string(error.what()).find("open_own_objects_only"), std::string::npos)
        << error.what();
  }
  EXPECT_FALSE(client.opens_own_objects_only());

  auto held = client.lock("earlier.lock");
  held.lock();
  auto contender = direct.lock("earlier.lock");
  EXPECT_FALSE(contender.try_lock());
  held.unlock();
  EXPECT_TRUE(contender.try_lock());
  contender.unlock();

  const ChannelOptions options{.slots = 2, .slot_bytes = 64, .consumers = 2};
  auto producer = client.channel("earlier.items", ChannelRole::producer, options);
  ChannelOptions other_cut = options;
  other_cut.slots = 4;
  other_cut.slot_bytes = 32;
  // Refused had the producer named its layout (Channel.AConsumerThatCutsTheSlotsOtherwise...).
  auto unchecked = direct.channel("earlier.items", ChannelRole::consumer, other_cut);
  auto consumer = client.channel("earlier.items", ChannelRole::consumer, options);
  const auto slot = producer.acquire_slot();
  ASSERT_EQ(slot.status, BarrierStatus::ok);
  std::memset(slot.data, 5, 64);
  producer.publish();
  for (Channel* each : {&consumer, &unchecked}) {
    const auto got = each->acquire();
    ASSERT_EQ(got.status, BarrierStatus::ok);
    EXPECT_EQ(static_cast<const unsigned char*>(got.data)[63], 5);
    each->release();
  }
}

TEST(Integration, ASecondDaemonOnTheSameSocketRefusesAndAStaleSocketIsReplaced) {
  daemon_process daemon;
  child_process second({daemon_binary(), "--socket", daemon.socket_path()});
  const auto status = second.wait();
  ASSERT_TRUE(status);
  EXPECT_EQ(exit_code(*status), 1);
  daemon.connect().ping();

  const std::string stale = daemon.folder() + "/stale.sock";
  {
    unique_fd fd(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, stale.c_str(), stale.size());
    ASSERT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  }
  child_process replacement({daemon_binary(), "--socket", stale});
  for (auto deadline = std::chrono::steady_clock::now() + 10s;;) {
    try {
      gpumem::Client::connect({.socket_path = stale}).ping();
      break;
    } catch (const gpumem::Error&) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(5ms);
    }
  }
  replacement.signal(SIGTERM);
  EXPECT_EQ(exit_code(*replacement.wait()), 0);
}

TEST(Integration, SigtermEndsEverySessionAndRemovesTheSocket) {
  auto daemon = std::make_unique<daemon_process>();
  // The daemon does not come back: calls after the stop wait for it only briefly.
  auto client =
      gpumem::Client::connect({.socket_path = daemon->socket_path(), .reconnect_for = 100ms});
  auto buffer = client.allocate(1 << 20, {.name = "at-shutdown"});
  const std::string path = daemon->socket_path();
  EXPECT_EQ(daemon->stop(), 0);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_THROW(client.ping(), gpumem::Error);
  EXPECT_EQ(static_cast<unsigned char*>(buffer.data())[0], 0u) << "the mapping stays readable";
}

TEST(Integration, ABadConfigurationStopsTheDaemonWithStatus2) {
  const auto config = write_config("pools:\n  - {name: x, device: host, size: lots}\n");
  child_process daemon({daemon_binary(), "--config", config.path(), "--socket", "/tmp/never.sock"});
  const auto status = daemon.wait();
  ASSERT_TRUE(status);
  EXPECT_EQ(exit_code(*status), 2);
}

TEST(Integration, ForkedChildMustConnectItsOwnClient) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto buffer = client.allocate(4096);
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      client.ping();
      ::_exit(1);
    } catch (const gpumem::Error& error) {
      ::_exit(std::string(error.what()).find("forked child") != std::string::npos ? 0 : 2);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(exit_code(status), 0);
  client.ping();
  EXPECT_EQ(host_in_use(client), 4096u);
}

}  // namespace
}  // namespace gpumem::testing
