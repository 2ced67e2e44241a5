// The request mailbox (proto/mailbox.hpp) against a real gpumemd: what it answers through it,
// what it turns away and how, that the mapping a client can write never hurts the daemon or
// the other clients, and that a mailbox goes with its connection.
#include "gpumem/proto/mailbox.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "cpu_placement.hpp"
#include "gpumem/shared/os/memfd.hpp"
#include "gpumem/shared/sync/futex.hpp"
#include "request_mailbox.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/raw_client.hpp"
#include "support/scoped_env.hpp"
#include "support/systemd_supervisor.hpp"
#include "support/thread_state.hpp"

namespace {

using namespace std::chrono_literals;
using gpumem::detail::request_mailbox;
using gpumem::testing::daemon_process;
using gpumem::testing::eventually;
using gpumem::testing::process_state;
using gpumem::testing::raw_client;
using gpumem::testing::scoped_env;
using gpumem::testing::systemd_supervisor;
using gpumem::testing::thread_state;
namespace proto = gpumem::proto;
using proto::errc;
using proto::message_type;

/// The daemon's mappings of request mailboxes, from /proc (it keeps no descriptor of their
/// memfds once the client has its own).
std::size_t mailbox_mappings(pid_t daemon) {
  std::ifstream maps("/proc/" + std::to_string(daemon) + "/maps");
  std::size_t count = 0;
  for (std::string line; std::getline(maps, line);) {
    count += line.find("gpumemd:mailbox") != std::string::npos;
  }
  return count;
}

/// One connection greeted by hand, with its mailbox, speaking through it.
struct mailbox_connection {
  /// @param resumed the session to resume; a new one when empty.
  explicit mailbox_connection(const std::string& path,
                              const std::optional<proto::hello_reply>& resumed = std::nullopt)
      : socket(path) {
    const auto hello = resumed ? socket.resume(*resumed) : socket.hello();
    EXPECT_EQ(hello.code, errc::ok) << hello.text;
    EXPECT_NE(hello.reply.features & proto::kFeatureMailbox, 0u);
    session = hello.reply;
    auto opened =
        socket.call<proto::mailbox_reply>(message_type::open_mailbox, proto::empty_payload{});
    EXPECT_EQ(opened.code, errc::ok) << opened.text;
    EXPECT_EQ(opened.reply.bytes, proto::kMailboxBytes);
    if (opened.fds.size() != 2) throw std::runtime_error("open_mailbox brought no descriptors");
    memory = gpumem::unique_fd(::dup(opened.fds[0].get()));
    doorbell = gpumem::unique_fd(::dup(opened.fds[1].get()));
    box.emplace(std::move(opened.fds[0]), std::move(opened.fds[1]));
  }

  /// Posts @p frame as it is, and waits for the answer's frame.
  std::vector<std::byte> post(std::span<const std::byte> frame) {
    box->post(frame);
    std::vector<std::byte> answer(proto::kMaxFrameSize);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    std::optional<std::size_t> size;
    while (!(size = box->take_answer(answer))) {
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no answer");
      box->sleep(100ms);
    }
    answer.resize(*size);
    return answer;
  }

  template <class Request>
  std::vector<std::byte> call(message_type type, const Request& request, std::uint32_t id) {
    std::vector<std::byte> frame;
    proto::append_frame(frame, static_cast<std::uint16_t>(type), id, request);
    return post(frame);
  }

  /// Posts a ping numbered @p seq, the mailbox's own count of this connection's requests; its
  /// answer is not taken.
  void post_ping(std::uint32_t seq) {
    std::vector<std::byte> frame;
    proto::append_frame(frame, static_cast<std::uint16_t>(message_type::ping), seq,
                        proto::empty_payload{});
    box->post(frame);
  }

  /// Watches the reply counter, through a mapping of the test's own, until it holds the answer
  /// to request @p seq, and takes the answer. @return whether the daemon's mark for @p seq
  /// showed on the way; false, with a failure, when no answer came within 5 s.
  bool marked_before_answer(std::uint32_t seq) {
    if (!watched.get()) {
      watched = gpumem::os::mapping::share(memory.get(), proto::kMailboxBytes,
                                           gpumem::os::access::read_only);
    }
    auto& layout = *static_cast<proto::mailbox_layout*>(watched.get());
    const auto answer_word = proto::mailbox_word(layout.reply_seq);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    bool marked = false;
    for (std::uint32_t seen = 0; (seen = answer_word.load()) != seq;) {
      marked = marked || seen == proto::answering_mark(seq);
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "no answer to request " << seq;
        return false;
      }
    }
    std::vector<std::byte> answer(proto::kMaxFrameSize);
    EXPECT_TRUE(box->take_answer(answer)) << "request " << seq;
    return marked;
  }

  raw_client socket;
  proto::hello_reply session{};
  gpumem::unique_fd memory;  ///< the client's own copies, for what the class never does
  gpumem::unique_fd doorbell;
  std::optional<request_mailbox> box;
  gpumem::os::mapping watched;  ///< the test's own view of the mailbox (marked_before_answer)
};

/// The frame in @p answer, which it points into: keep @p answer while the frame is read.
proto::frame_view parsed(const std::vector<std::byte>& answer) {
  proto::frame_view frame;
  std::error_code error;
  EXPECT_EQ(proto::parse_frame(answer, frame, error), proto::parse_status::complete);
  EXPECT_EQ(frame.frame_size(), answer.size());
  return frame;
}

/// The refusal in @p answer: its code and text.
std::pair<errc, std::string> refusal(const std::vector<std::byte>& answer) {
  const proto::frame_view frame = parsed(answer);
  EXPECT_EQ(frame.head.type, static_cast<std::uint16_t>(message_type::error));
  proto::error_reply error{};
  EXPECT_FALSE(proto::decode_payload(frame.payload, error));
  return {static_cast<errc>(error.code), error.text};
}

void expect_ping_answered(mailbox_connection& connection, std::uint32_t id) {
  const auto answer = connection.call(message_type::ping, proto::empty_payload{}, id);
  const proto::frame_view frame = parsed(answer);
  EXPECT_EQ(frame.head.type, proto::reply_type(message_type::ping));
  EXPECT_EQ(frame.head.request_id, id);
}

/// The connection is served as before: a ping through the mailbox and one on the socket.
void expect_answered_both_ways(mailbox_connection& connection, std::uint32_t id) {
  expect_ping_answered(connection, id);
  EXPECT_EQ(
      connection.socket.call<proto::empty_payload>(message_type::ping, proto::empty_payload{}).code,
      errc::ok);
}

TEST(Mailbox, TheDaemonGivesASealedMailboxAndAnswersThroughIt) {
  daemon_process daemon;
  mailbox_connection connection(daemon.socket_path());
  EXPECT_EQ(gpumem::os::file_size(connection.memory.get()), proto::kMailboxBytes);
  const int seals = ::fcntl(connection.memory.get(), F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  // Shrunk under the daemon's mapping, the daemon would fault on its next answer.
  EXPECT_NE(::ftruncate(connection.memory.get(), 4096), 0);
  EXPECT_EQ(errno, EPERM);

  expect_ping_answered(connection, 7);
  proto::allocate_request wanted{};
  wanted.size = 4096;
  wanted.device = proto::kHostDevice;
  const auto grant = connection.call(message_type::allocate, wanted, 8);
  const proto::frame_view granted = parsed(grant);
  ASSERT_EQ(granted.head.type, proto::reply_type(message_type::allocate));
  proto::allocation_reply allocation{};
  ASSERT_FALSE(proto::decode_payload(granted.payload, allocation));
  // The socket and the mailbox are the same session: what one made, the other sees.
  const auto stats =
      connection.socket.call<proto::stats_reply>(message_type::stats, proto::empty_payload{});
  EXPECT_EQ(stats.reply.head.allocation_count, 1u);
  proto::release_request release{};
  release.alloc_id = allocation.alloc_id;
  const auto release_answer = connection.call(message_type::release, release, 9);
  const proto::frame_view released = parsed(release_answer);
  EXPECT_EQ(released.head.type, proto::reply_type(message_type::release));
  EXPECT_TRUE(daemon.wait_for_bytes_in_use(0, 1s));
}

TEST(Mailbox, ALoneRequestIsMarkedAsBeingHandledBeforeItsAnswer) {
  daemon_process daemon;
  mailbox_connection connection(daemon.socket_path());
  // The mark stands from the request's taking to its answer, a microsecond or so: watched from
  // another CPU, it shows within a few requests. On the daemon's CPU the watcher, which never
  // sleeps, would only let the daemon run while the watcher itself does not.
  const cpu_placement placed({daemon.pid()}, cpu_placement::sides::apart);
  if (placed.report().starts_with("not pinned")) GTEST_SKIP() << placed.report();
  bool marked = false;
  for (std::uint32_t seq = 1; seq <= 2000 && !marked; ++seq) {
    connection.post_ping(seq);
    marked = connection.marked_before_answer(seq);
  }
  EXPECT_TRUE(marked) << "no request of 2000 was seen marked as being handled";
}

/// CPU time this thread has used.
std::chrono::nanoseconds thread_cpu_time() {
  timespec used{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &used);
  return std::chrono::seconds(used.tv_sec) + std::chrono::nanoseconds(used.tv_nsec);
}

TEST(Mailbox, AClientWokenByTheMarkSpinsAndThenSleepsUntilTheAnswer) {
  // The daemon's side played by hand on a mailbox of the test's own.
  gpumem::unique_fd memory = gpumem::os::make_sealed_memfd("test:mailbox", proto::kMailboxBytes);
  gpumem::unique_fd doorbell(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  ASSERT_TRUE(doorbell);
  auto* layout = static_cast<proto::mailbox_layout*>(
      ::mmap(nullptr, proto::kMailboxBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memory.get(), 0));
  ASSERT_NE(layout, MAP_FAILED);
  request_mailbox box(gpumem::unique_fd(::dup(memory.get())),
                      gpumem::unique_fd(::dup(doorbell.get())));
  const std::vector<std::byte> request(24, std::byte{1});
  box.post(request);
  const std::uint32_t seq = proto::mailbox_word(layout->request_seq).load();
  EXPECT_EQ(box.unanswered_value(), seq - 1);
  EXPECT_FALSE(box.answering());

  constexpr auto kAnswerAfter = 200ms;
  const pid_t client = ::gettid();
  std::atomic<bool> answered{false};
  std::thread daemon_side([&] {
    // The mark must find the client asleep on the word: it is what wakes it.
    const auto give_up = std::chrono::steady_clock::now() + 5s;
    while (thread_state(client) != 'S' && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(1ms);
    }
    proto::mailbox_word(layout->reply_seq).store(proto::answering_mark(seq));
    gpumem::sync::futex_wake(&layout->reply_seq);
    std::this_thread::sleep_for(kAnswerAfter);
    layout->reply[0] = std::byte{7};
    proto::mailbox_word(layout->reply_size).store(1);
    answered = true;
    proto::mailbox_word(layout->reply_seq).store(seq);
    gpumem::sync::futex_wake(&layout->reply_seq);
  });
  EXPECT_TRUE(box.sleep(10s));
  EXPECT_FALSE(answered) << "the mark did not wake the sleeping client";
  EXPECT_TRUE(box.answering());
  EXPECT_EQ(box.unanswered_value(), proto::answering_mark(seq));
  std::vector<std::byte> answer(proto::kMaxFrameSize);
  EXPECT_FALSE(box.take_answer(answer));
  // Marked, the next wait spins a while (20 us) and then sleeps until the answer, 200 ms on:
  // it returns with the answer there, having used a few milliseconds of CPU at most.
  const auto cpu_before = thread_cpu_time();
  EXPECT_TRUE(box.sleep(10s));
  EXPECT_TRUE(answered);
  EXPECT_LT(thread_cpu_time() - cpu_before, 20ms) << "it spun instead of sleeping";
  EXPECT_EQ(box.take_answer(answer), 1u);
  EXPECT_EQ(answer[0], std::byte{7});
  EXPECT_FALSE(box.answering());
  daemon_side.join();
  ::munmap(layout, proto::kMailboxBytes);
}

TEST(Mailbox, RequestsTakenInOneWakeUpAreAnsweredWithoutAMark) {
  // With several requests in one wake-up, the replies wait for all of them: no caller is woken
  // early. Rung while the daemon is stopped, two mailboxes' requests meet in its next wake-up.
  daemon_process daemon;
  std::array<std::optional<mailbox_connection>, 2> connections;
  for (auto& connection : connections) connection.emplace(daemon.socket_path());
  const cpu_placement placed({daemon.pid()}, cpu_placement::sides::apart);
  if (placed.report().starts_with("not pinned")) GTEST_SKIP() << placed.report();
  for (std::uint32_t seq = 1; seq <= 50; ++seq) {
    ASSERT_EQ(::kill(daemon.pid(), SIGSTOP), 0);
    ASSERT_TRUE(eventually([&] { return process_state(daemon.pid()) == 'T'; }));
    for (auto& connection : connections) connection->post_ping(seq);
    ASSERT_EQ(::kill(daemon.pid(), SIGCONT), 0);
    for (auto& connection : connections) {
      ASSERT_FALSE(connection->marked_before_answer(seq)) << "request " << seq << " was marked";
    }
  }
}

TEST(Mailbox, WhatCannotComeThroughIsRefusedByNameAndTheConnectionGoesOn) {
  daemon_process daemon;
  mailbox_connection connection(daemon.socket_path());
  // Replies with descriptors, and the requests that belong to the connection.
  for (const auto& [type, name] : {std::pair{message_type::get_pool, "get_pool"},
                                   std::pair{message_type::attach_sync, "attach_sync"},
                                   std::pair{message_type::open_mailbox, "open_mailbox"},
                                   std::pair{message_type::subscribe_events, "subscribe_events"}}) {
    const auto [code, text] = refusal(connection.call(type, proto::empty_payload{}, 20));
    EXPECT_EQ(code, errc::invalid_argument) << name;
    EXPECT_NE(text.find(std::string(name) + " may not come through the request mailbox"),
              std::string::npos)
        << text;
  }
  const auto [hello_code, hello_text] = refusal(connection.call(
      message_type::hello, proto::hello_request{proto::kProtocolVersion, 0, {}, 0, {}}, 21));
  EXPECT_EQ(hello_code, errc::invalid_argument);
  EXPECT_NE(hello_text.find("hello may not come through"), std::string::npos) << hello_text;
  expect_answered_both_ways(connection, 22);
}

TEST(Mailbox, BadBytesInTheMailboxAreAnsweredWithAnErrorAndNothingElseHappens) {
  daemon_process daemon;
  mailbox_connection connection(daemon.socket_path());
  auto* layout = static_cast<proto::mailbox_layout*>(::mmap(nullptr, proto::kMailboxBytes,
                                                            PROT_READ | PROT_WRITE, MAP_SHARED,
                                                            connection.memory.get(), 0));
  ASSERT_NE(layout, MAP_FAILED);

  // A size beyond the slot, written after the class posted a good frame.
  std::vector<std::byte> ping;
  proto::append_frame(ping, static_cast<std::uint16_t>(message_type::ping), 30,
                      proto::empty_payload{});
  connection.box->post(ping);
  // Once the good frame is answered, a size beyond the slot is put in by hand.
  std::vector<std::byte> answer(proto::kMaxFrameSize);
  ASSERT_TRUE(eventually([&] { return connection.box->take_answer(answer).has_value(); }));
  proto::mailbox_word(layout->request_size).store(0xffffffffu);
  proto::mailbox_word(layout->request_seq).fetch_add(1);
  const std::uint64_t one = 1;
  ASSERT_EQ(::write(connection.doorbell.get(), &one, sizeof one), 8);
  ASSERT_TRUE(eventually([&] {
    return proto::mailbox_word(layout->reply_seq).load() ==
           proto::mailbox_word(layout->request_seq).load();
  }));
  std::vector<std::byte> oversized(layout->reply, layout->reply + layout->reply_size);
  const auto [code, text] = refusal(oversized);
  EXPECT_EQ(code, errc::bad_message);
  EXPECT_NE(text.find("larger than the largest frame"), std::string::npos) << text;
  ::munmap(layout, proto::kMailboxBytes);

  // The class's own count of requests is behind the one written by hand: a new connection.
  mailbox_connection again(daemon.socket_path());
  // A frame whose size says more than the mailbox holds, and bytes that are no header.
  std::vector<std::byte> padded = ping;
  padded.resize(padded.size() + 3);
  const auto [padded_code, padded_text] = refusal(again.post(padded));
  EXPECT_EQ(padded_code, errc::bad_message);
  EXPECT_NE(padded_text.find("not that of the one frame"), std::string::npos) << padded_text;
  const std::vector<std::byte> garbage(64, std::byte{0x5a});
  const auto [garbage_code, garbage_text] = refusal(again.post(garbage));
  EXPECT_EQ(garbage_code, errc::bad_message);
  EXPECT_NE(garbage_text.find("bad frame header in the request mailbox"), std::string::npos)
      << garbage_text;
  expect_answered_both_ways(again, 31);
}

TEST(Mailbox, ADoorbellRungWithoutARequestAnswersNothingAndKeepsNobodyWaiting) {
  daemon_process daemon;
  mailbox_connection ringer(daemon.socket_path());
  mailbox_connection other(daemon.socket_path());
  const std::uint64_t one = 1;
  for (int ring = 0; ring < 20000; ++ring) {
    ASSERT_EQ(::write(ringer.doorbell.get(), &one, sizeof one), 8);
  }
  // A counter at its limit refuses the next ring: the class empties it and rings again.
  const std::uint64_t almost_full = 0xfffffffffffffffeull - 20000;
  ASSERT_EQ(::write(ringer.doorbell.get(), &almost_full, sizeof almost_full), 8);
  expect_ping_answered(other, 40);  // after the rings, which came first
  const auto* layout = static_cast<const proto::mailbox_layout*>(
      ::mmap(nullptr, proto::kMailboxBytes, PROT_READ, MAP_SHARED, ringer.memory.get(), 0));
  ASSERT_NE(layout, MAP_FAILED);
  EXPECT_EQ(proto::mailbox_word(const_cast<std::uint32_t&>(layout->reply_seq)).load(), 0u)
      << "the daemon answered a ring that brought no request";
  ::munmap(const_cast<proto::mailbox_layout*>(layout), proto::kMailboxBytes);
  expect_ping_answered(ringer, 41);
  expect_ping_answered(ringer, 42);
}

TEST(Mailbox, AMailboxGoesWithItsConnectionAndItsKilledProcess) {
  daemon_process daemon;
  auto watcher = daemon.connect();
  watcher.ping();
  const std::size_t before = mailbox_mappings(daemon.pid());
  EXPECT_EQ(before, 1u);  // the watcher's
  {
    mailbox_connection connection(daemon.socket_path());
    expect_ping_answered(connection, 50);
    EXPECT_EQ(mailbox_mappings(daemon.pid()), before + 1);
  }
  EXPECT_TRUE(eventually([&] { return mailbox_mappings(daemon.pid()) == before; }));

  // A process killed while it calls through its mailbox, holding memory.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      gpumem::ConnectOptions options;
      options.socket_path = daemon.socket_path();
      auto client = gpumem::Client::connect(options);
      auto held = client.allocate(8192, {.device = gpumem::kHost});
      for (;;) client.ping();
    } catch (...) {
    }
    ::_exit(1);
  }
  EXPECT_TRUE(eventually([&] { return mailbox_mappings(daemon.pid()) == before + 1; }));
  EXPECT_TRUE(daemon.wait_for_bytes_in_use(8192, 2s));
  std::this_thread::sleep_for(20ms);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(daemon.wait_for_bytes_in_use(0, 2s));
  EXPECT_TRUE(eventually([&] { return mailbox_mappings(daemon.pid()) == before; }));
  watcher.ping();
}

TEST(Mailbox, TheClientLibraryUsesTheMailboxUnlessGpumemMailboxIsZero) {
  daemon_process daemon;
  {
    auto on_the_socket = [&] {
      const scoped_env socket_only("GPUMEM_MAILBOX", "0");
      return daemon.connect();
    }();
    on_the_socket.ping();
    auto buffer = on_the_socket.allocate(4096, {.device = gpumem::kHost});
    EXPECT_EQ(mailbox_mappings(daemon.pid()), 0u);
    auto through_the_mailbox = daemon.connect();
    through_the_mailbox.ping();
    EXPECT_EQ(mailbox_mappings(daemon.pid()), 1u);
  }
  const scoped_env unclear("GPUMEM_MAILBOX", "sometimes");
  try {
    (void)daemon.connect();
    ADD_FAILURE() << "connected with GPUMEM_MAILBOX=sometimes";
  } catch (const gpumem::Error& error) {
    EXPECT_EQ(error.status(), gpumem::errc::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("$GPUMEM_MAILBOX is 'sometimes'"), std::string::npos)
        << error.what();
  }
}

// The call in flight when the daemon died goes again through the new connection's mailbox,
// which the client asks for first: the kept reply still answers it, and nothing is done twice.
TEST(Mailbox, ACallSentAgainThroughANewMailboxAfterASigkillIsAnsweredFromTheKeptReply) {
  systemd_supervisor daemon({});
  daemon.start();
  std::optional<mailbox_connection> before(daemon.socket_path());
  proto::allocate_request wanted{};
  wanted.size = 4096;
  wanted.device = proto::kHostDevice;
  ASSERT_FALSE(proto::make_wire_name("kept.allocation", wanted.name));
  const auto grant = before->call(message_type::allocate, wanted, 60);
  const proto::frame_view made = parsed(grant);
  ASSERT_EQ(made.head.type, proto::reply_type(message_type::allocate));
  proto::allocation_reply first{};
  ASSERT_FALSE(proto::decode_payload(made.payload, first));
  const proto::hello_reply session = before->session;
  daemon.kill(SIGKILL);
  before.reset();  // after the death: a hang-up before it would end the session
  daemon.start();

  mailbox_connection after(daemon.socket_path(), session);
  const auto regrant = after.call(message_type::allocate, wanted, 60);
  const proto::frame_view again = parsed(regrant);
  ASSERT_NE(again.head.type, static_cast<std::uint16_t>(message_type::error))
      << refusal(regrant).second;
  ASSERT_EQ(again.head.type, proto::reply_type(message_type::allocate));
  proto::allocation_reply second{};
  ASSERT_FALSE(proto::decode_payload(again.payload, second));
  EXPECT_EQ(second.alloc_id, first.alloc_id);
}

}  // namespace
