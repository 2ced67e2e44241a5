// Clients carry on across a daemon restart: a broken connection is made again within
// ConnectOptions::reconnect_for, the session resumed by its token, and the call in flight
// carried out once. Without the fd store a restarted daemon has no sessions: session_lost.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "gpumem/gpumem.h"
#include "gpumem/gpumem.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/raw_client.hpp"
#include "support/scoped_env.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// A new gpumemd on the socket of one that was killed, once it answers.
child_process start_daemon_on(const std::string& socket) {
  child_process started({daemon_binary(), "--socket", socket, "--log-level", "warn"});
  const auto deadline = clock_type::now() + 20s;
  for (;;) {
    try {
      Client::connect({.socket_path = socket, .label = "probe"}).ping();
      return started;
    } catch (const Error&) {
      if (clock_type::now() > deadline) throw;
      std::this_thread::sleep_for(5ms);
    }
  }
}

/// The error @p call throws, and how long it took.
std::pair<Error, clock_type::duration> failure_of(const std::function<void()>& call) {
  const auto start = clock_type::now();
  try {
    call();
  } catch (const Error& error) {
    return {error, clock_type::now() - start};
  }
  return {Error(errc::ok, "it did not fail"), clock_type::now() - start};
}

TEST(Reconnect, ADaemonRestartedWithoutStateIsSessionLostNamingTheSocket) {
  daemon_process daemon;
  auto client = Client::connect({.socket_path = daemon.socket_path(), .reconnect_for = 10s});
  Buffer kept = client.allocate(4096, {.name = "kept"});
  std::memset(kept.data(), 7, kept.size());
  daemon.stop(SIGKILL);

  // The call starts while no daemon runs, and waits for the new one.
  auto call = std::async(std::launch::async, [&] { return failure_of([&] { client.ping(); }); });
  std::this_thread::sleep_for(200ms);
  child_process restarted = start_daemon_on(daemon.socket_path());
  const auto [error, took] = call.get();
  EXPECT_EQ(error.status(), errc::session_lost) << error.what();
  EXPECT_TRUE(contains(error.what(), daemon.socket_path())) << error.what();
  EXPECT_TRUE(contains(error.what(), "restarted without this session's state")) << error.what();
  EXPECT_LT(took, 5s);

  const auto [later, later_took] = failure_of([&] { client.allocate(4096); });
  EXPECT_EQ(later.status(), errc::session_lost) << later.what();
  EXPECT_LT(later_took, 1s);
  EXPECT_EQ(static_cast<unsigned char*>(kept.data())[4095], 7) << "mapped memory stays usable";
  EXPECT_EQ(failure_of([&] { kept.release(); }).first.status(), errc::session_lost);
  Client::connect({.socket_path = daemon.socket_path()}).ping();
}

TEST(Reconnect, ADaemonThatStaysAwayIsAnIoErrorAfterReconnectFor) {
  daemon_process daemon;
  auto client = Client::connect({.socket_path = daemon.socket_path(), .reconnect_for = 300ms});
  daemon.stop(SIGKILL);
  const auto [error, took] = failure_of([&] { client.ping(); });
  EXPECT_EQ(error.status(), errc::io_error) << error.what();
  EXPECT_TRUE(contains(error.what(), daemon.socket_path())) << error.what();
  EXPECT_TRUE(contains(error.what(), "300 ms")) << error.what();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 2s);
  // A later call tries once more, without waiting all over again.
  const auto [again, again_took] = failure_of([&] { client.ping(); });
  EXPECT_EQ(again.status(), errc::io_error) << again.what();
  EXPECT_LT(again_took, 200ms);
}

TEST(Reconnect, ReconnectForZeroIsAnIoErrorAtOnce) {
  daemon_process daemon;
  auto client = Client::connect({.socket_path = daemon.socket_path(), .reconnect_for = 0ms});
  auto from_environment = [&] {
    const scoped_env never("GPUMEM_RECONNECT_MS", "0");
    return daemon.connect();
  }();
  gpumem_connect_options options{};
  options.socket_path = daemon.socket_path().c_str();
  options.has_reconnect_ms = 1;
  options.reconnect_ms = 0;
  gpumem_client* c_client = nullptr;
  ASSERT_EQ(gpumem_connect_with(&options, &c_client), GPUMEM_OK);
  daemon.stop(SIGKILL);

  for (Client* each : {&client, &from_environment}) {
    const auto [error, took] = failure_of([&] { each->ping(); });
    EXPECT_EQ(error.status(), errc::io_error) << error.what();
    EXPECT_TRUE(contains(error.what(), "reconnecting is off")) << error.what();
    EXPECT_TRUE(contains(error.what(), daemon.socket_path())) << error.what();
    EXPECT_LT(took, 100ms);
  }
  gpumem_buffer* buffer = nullptr;
  EXPECT_EQ(gpumem_allocate(c_client, 4096, GPUMEM_HOST, nullptr, &buffer), GPUMEM_IO_ERROR);
  gpumem_disconnect(c_client);
  EXPECT_EQ(gpumem_status_string(GPUMEM_SESSION_LOST), std::string("session lost"));

  const scoped_env unclear("GPUMEM_RECONNECT_MS", "soon");
  EXPECT_EQ(
      failure_of([&] { Client::connect({.socket_path = daemon.socket_path()}); }).first.status(),
      errc::invalid_argument);
}

/// A session of this process, spoken by hand, that holds a barrier party: its row outlives
/// the connection (the daemon keeps a live process's sync objects until it exits).
struct held_session {
  proto::hello_reply hello;
  proto::sync_open_reply party;
  std::uint32_t open_request_id;
};

proto::sync_open_request barrier_request(const char* name) {
  proto::sync_open_request request{};
  EXPECT_FALSE(proto::make_wire_name(name, request.name));
  request.kind = proto::sync_kind::barrier;
  request.parties = 2;
  return request;
}

held_session hold_a_barrier_party(const std::string& socket) {
  raw_client raw(socket);
  const auto hello = raw.hello();
  EXPECT_EQ(hello.code, errc::ok) << hello.text;
  EXPECT_EQ(
      raw.call<proto::sync_attach_reply>(proto::message_type::attach_sync, proto::empty_payload{})
          .code,
      errc::ok);
  const auto opened =
      raw.call<proto::sync_open_reply>(proto::message_type::open_sync, barrier_request("meet"));
  EXPECT_EQ(opened.code, errc::ok) << opened.text;
  return {hello.reply, opened.reply, raw.last_request_id()};
}

/// Resumes @p session on @p raw once the daemon has seen its last connection close (a refused
/// hello leaves the connection free to say hello again).
raw_answer<proto::hello_reply> resume_when_closed(raw_client& raw,
                                                  const proto::hello_reply& session) {
  const auto deadline = clock_type::now() + 5s;
  for (;;) {
    auto answer = raw.resume(session);
    if (answer.code != errc::session_lost || clock_type::now() > deadline) return answer;
    std::this_thread::sleep_for(5ms);
  }
}

TEST(Resume, TheCallInFlightIsAnsweredFromTheRowNotCarriedOutTwice) {
  daemon_process daemon;
  const held_session session = hold_a_barrier_party(daemon.socket_path());
  raw_client raw(daemon.socket_path());
  const auto resumed = resume_when_closed(raw, session.hello);
  ASSERT_EQ(resumed.code, errc::ok) << resumed.text;
  EXPECT_EQ(resumed.reply.client_id, session.hello.client_id);
  EXPECT_EQ(resumed.reply.daemon_instance, session.hello.daemon_instance);

  // The same id and type as the last request that changed state: its reply, again.
  raw.number_next_request(session.open_request_id);
  const auto repeated =
      raw.call<proto::sync_open_reply>(proto::message_type::open_sync, barrier_request("meet"));
  ASSERT_EQ(repeated.code, errc::ok) << repeated.text;
  EXPECT_EQ(repeated.reply.party, session.party.party);
  EXPECT_EQ(repeated.reply.cell, session.party.cell);
  // Only the first request after the resume is looked up: the same request again is carried out.
  raw.number_next_request(session.open_request_id);
  const auto second_party =
      raw.call<proto::sync_open_reply>(proto::message_type::open_sync, barrier_request("meet"));
  ASSERT_EQ(second_party.code, errc::ok) << second_party.text;
  EXPECT_NE(second_party.reply.party, session.party.party);
}

TEST(Resume, ARequestOtherThanTheLastIsCarriedOut) {
  daemon_process daemon;
  const held_session session = hold_a_barrier_party(daemon.socket_path());
  raw_client raw(daemon.socket_path());
  ASSERT_EQ(resume_when_closed(raw, session.hello).code, errc::ok);
  raw.number_next_request(session.open_request_id + 1);
  const auto next =
      raw.call<proto::sync_open_reply>(proto::message_type::open_sync, barrier_request("meet"));
  ASSERT_EQ(next.code, errc::ok) << next.text;
  EXPECT_NE(next.reply.party, session.party.party) << "a new request takes the second party";
}

TEST(Resume, IsRefusedWithoutTheTokenWhileServedOrForAnUnknownSession) {
  daemon_process daemon;
  const held_session session = hold_a_barrier_party(daemon.socket_path());

  proto::hello_reply guessed = session.hello;
  guessed.token.words[0] ^= 1;
  raw_client wrong_token(daemon.socket_path());
  const auto refused = wrong_token.resume(guessed);
  EXPECT_EQ(refused.code, errc::session_lost);

  raw_client owner(daemon.socket_path());
  ASSERT_EQ(resume_when_closed(owner, session.hello).code, errc::ok);
  raw_client second(daemon.socket_path());
  const auto served = second.resume(session.hello);
  EXPECT_EQ(served.code, errc::session_lost);
  EXPECT_TRUE(contains(served.text, "another connection serves it")) << served.text;

  proto::hello_reply unknown = session.hello;
  unknown.client_id += 1000;
  raw_client stranger(daemon.socket_path());
  const auto missing = stranger.resume(unknown);
  EXPECT_EQ(missing.code, errc::session_lost);
  EXPECT_TRUE(contains(missing.text, "restarted without its state")) << missing.text;
  // A refused resume leaves the connection free to start a session of its own.
  EXPECT_EQ(stranger.hello().code, errc::ok);
}

}  // namespace
}  // namespace gpumem::testing
