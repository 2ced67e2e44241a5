// Clients that misbehave on the raw protocol, as a hostile or careless process would (issue
// 11). One writes garbage into the shared sync page, then asks for a reset or dies: the daemon
// stays responsive, reports the object corrupt, and a reset makes it work again (finding 1).
// One closes its connection and lives on (finding 8).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "gpumem/proto/codec.hpp"
#include "gpumem/shared/fd_passing.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "support/daemon_process.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

/// How soon the daemon must answer others after an attack (issue 11).
constexpr auto kAnswerBound = 100ms;

enum class target { lock, barrier };
enum class afterwards { ask_for_reset, get_killed };

/// The protocol by hand: one request, its reply and the descriptors that came with it.
class raw_client {
 public:
  explicit raw_client(const std::string& path)
      : socket_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.c_str(), path.size());
    if (::connect(socket_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      ::_exit(10);
    }
    call<proto::hello_reply>(proto::message_type::hello,
                             proto::hello_request{proto::kProtocolVersion, 0, {}});
  }

  template <class Reply, class Request>
  Reply call(proto::message_type type, const Request& request) {
    std::vector<std::byte> frame;
    proto::append_frame(frame, static_cast<std::uint16_t>(type), next_id_++, request);
    std::error_code error;
    send_with_fds(socket_.get(), frame, {}, error);
    for (;;) {
      proto::frame_view reply;
      if (proto::parse_frame(in_, reply, error) == proto::parse_status::complete) {
        Reply decoded{};
        if (reply.head.type != proto::reply_type(type) ||
            proto::decode_payload(reply.payload, decoded)) {
          ::_exit(11);
        }
        in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(reply.frame_size()));
        return decoded;
      }
      std::byte chunk[4096];
      const std::size_t got = recv_with_fds(socket_.get(), chunk, fds, error);
      if (error || got == 0) ::_exit(12);
      in_.insert(in_.end(), chunk, chunk + got);
    }
  }

  std::vector<unique_fd> fds;

 private:
  unique_fd socket_;
  std::uint32_t next_id_ = 1;
  std::vector<std::byte> in_;
};

/// The forked attacker: opens @p name, writes into its cell what no lock or barrier leaves
/// there, tells @p report, then asks for a reset (and reports the answer) or waits to die.
[[noreturn]] void attack(const std::string& socket_path, const std::string& name, target what,
                         afterwards then, int report) {
  raw_client raw(socket_path);
  const auto attached =
      raw.call<proto::sync_attach_reply>(proto::message_type::attach_sync, proto::empty_payload{});
  proto::sync_open_request open{};
  (void)proto::make_wire_name(name, open.name);
  open.kind = what == target::lock ? proto::sync_kind::lock : proto::sync_kind::barrier;
  open.parties = what == target::lock ? 0 : 2;
  const auto opened = raw.call<proto::sync_open_reply>(proto::message_type::open_sync, open);
  void* page = ::mmap(nullptr, sync::kHostPageSize, PROT_READ | PROT_WRITE, MAP_SHARED,
                      raw.fds.at(0).get(), 0);
  if (page == MAP_FAILED) ::_exit(13);
  std::byte* cell = static_cast<std::byte*>(page) + opened.cell * sync::kCellSize;
  if (what == target::lock) {
    // Itself as holder, a ticket queued behind it, and no queue entry for that ticket.
    auto& lock = *reinterpret_cast<sync::lock_cell*>(cell);
    lock.domain = sync::domain_word(sync::domain::host);
    sync::lock_word word;
    word.owner = static_cast<std::uint16_t>(attached.slot);
    word.serving = 7;
    word.next = 9;
    std::atomic_ref<std::uint64_t>(lock.word).store(word.encode());
  } else {
    auto& counters = *reinterpret_cast<sync::counter_cell*>(cell);
    counters.parties = 7;
    counters.state = 0x5a5a5a5au;
  }
  if (then == afterwards::ask_for_reset) {
    proto::sync_reset_request reset{};
    (void)proto::make_wire_name(name, reset.name);
    raw.call<proto::empty_payload>(proto::message_type::reset_sync, reset);
  }
  const char done = 'x';
  if (::write(report, &done, 1) != 1) ::_exit(14);
  ::pause();
  ::_exit(0);
}

/// A forked child running @p body(report), which writes one byte to report when it is done.
class forked_child {
 public:
  template <class Body>
  explicit forked_child(Body&& body) {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category());
    report_.reset(ends[0]);
    unique_fd write_end(ends[1]);
    pid_ = ::fork();
    if (pid_ == 0) {
      body(write_end.get());
      ::_exit(0);
    }
  }
  forked_child(const forked_child&) = delete;
  forked_child& operator=(const forked_child&) = delete;
  ~forked_child() { kill(); }

  /// @return whether it reported within @p within.
  bool done(std::chrono::milliseconds within) {
    pollfd ready{report_.get(), POLLIN, 0};
    char byte = 0;
    return ::poll(&ready, 1, static_cast<int>(within.count())) == 1 &&
           ::read(report_.get(), &byte, 1) == 1;
  }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  unique_fd report_;
};

class attacker : public forked_child {
 public:
  attacker(const daemon_process& daemon, const std::string& name, target what, afterwards then)
      : forked_child([&](int report) { attack(daemon.socket_path(), name, what, then, report); }) {}
};

/// How long the daemon takes to answer @p client's ping.
std::chrono::nanoseconds ping_time(Client& client) {
  const auto started = clock_type::now();
  client.ping();
  return clock_type::now() - started;
}

/// The daemon finished the clean-up after a death once the object says so.
bool becomes_corrupt(Client& client, const std::string& name) {
  const auto deadline = clock_type::now() + 2s;
  while (clock_type::now() < deadline) {
    for (const auto& each : client.sync_objects()) {
      if (each.name == name && each.corrupt) return true;
    }
    std::this_thread::sleep_for(2ms);
  }
  return false;
}

void expect_refused_as_corrupt(Client& client, const std::string& name, target what) {
  try {
    if (what == target::lock) {
      (void)client.lock(name);
    } else {
      (void)client.barrier(name, 2);
    }
    ADD_FAILURE() << name << " was opened although corrupt";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::not_recoverable) << error.what();
    EXPECT_NE(std::string(error.what()).find("corrupt"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(name), std::string::npos) << error.what();
  }
}

void expect_working_lock(Client& client, const std::string& name) {
  auto lock = client.lock(name);
  EXPECT_EQ(lock.try_acquire_for(1s), LockStatus::acquired);
  lock.unlock();
}

TEST(SyncAttack, ALockWordThatHangsAReleaseIsRewrittenByTheResetItAsksFor) {
  daemon_process daemon;
  auto bystander = daemon.connect("bystander");
  attacker evil(daemon, "victim.lock", target::lock, afterwards::ask_for_reset);
  ASSERT_TRUE(evil.done(5s)) << "the daemon did not answer the attacker's reset";
  EXPECT_LT(ping_time(bystander), kAnswerBound);
  evil.kill();
  expect_working_lock(bystander, "victim.lock");
}

TEST(SyncAttack, ALockWordThatHangsAReleaseMarksTheLockCorruptWhenItsWriterDies) {
  daemon_process daemon;
  auto bystander = daemon.connect("bystander");
  attacker evil(daemon, "victim.lock", target::lock, afterwards::get_killed);
  ASSERT_TRUE(evil.done(5s));
  evil.kill();
  EXPECT_LT(ping_time(bystander), kAnswerBound);
  ASSERT_TRUE(becomes_corrupt(bystander, "victim.lock"));
  EXPECT_LT(ping_time(bystander), kAnswerBound);
  expect_refused_as_corrupt(bystander, "victim.lock", target::lock);
  bystander.reset("victim.lock");
  expect_working_lock(bystander, "victim.lock");
}

TEST(SyncAttack, ABarrierCellOfGarbageIsRewrittenByTheResetItAsksFor) {
  daemon_process daemon;
  auto bystander = daemon.connect("bystander");
  auto mine = bystander.barrier("victim.barrier", 2);
  attacker evil(daemon, "victim.barrier", target::barrier, afterwards::ask_for_reset);
  ASSERT_TRUE(evil.done(5s));
  EXPECT_LT(ping_time(bystander), kAnswerBound);
  evil.kill();
  EXPECT_LT(ping_time(bystander), kAnswerBound);
  bystander.reset("victim.barrier", 2);
  auto other = daemon.connect("other").barrier("victim.barrier", 2);
  std::thread arriving([&] { other.arrive_and_wait(); });
  EXPECT_EQ(mine.arrive_and_wait(), BarrierStatus::ok);
  arriving.join();
}

TEST(SyncAttack, ABarrierCellOfGarbageIsReportedCorruptWhenItsWriterDies) {
  daemon_process daemon;
  auto bystander = daemon.connect("bystander");
  auto mine = bystander.barrier("victim.barrier", 2);
  attacker evil(daemon, "victim.barrier", target::barrier, afterwards::get_killed);
  ASSERT_TRUE(evil.done(5s));
  evil.kill();
  EXPECT_LT(ping_time(bystander), kAnswerBound);
  ASSERT_TRUE(becomes_corrupt(bystander, "victim.barrier"));
  EXPECT_EQ(mine.arrive_and_wait(), BarrierStatus::broken);
  auto newcomer = daemon.connect("newcomer");
  expect_refused_as_corrupt(newcomer, "victim.barrier", target::barrier);
  bystander.reset("victim.barrier", 2);
  auto other = newcomer.barrier("victim.barrier", 2);
  std::thread arriving([&] { other.arrive_and_wait(); });
  EXPECT_EQ(mine.arrive_and_wait(), BarrierStatus::ok);
  arriving.join();
}

// Issue 11, finding 8: a connection that closes while its process lives.
TEST(SyncLifetime, AClosedConnectionsHostMemoryIsLetGoAtOnceAndItsLockWhenItsProcessExits) {
  daemon_process daemon;
  auto watcher = daemon.connect("watcher");
  constexpr std::uint64_t kBytes = 64 << 20;
  forked_child leaver([&](int report) {
    {
      raw_client raw(daemon.socket_path());
      raw.call<proto::allocation_reply>(proto::message_type::allocate,
                                        proto::allocate_request{kBytes, kHost, 0, {}, {}});
      raw.call<proto::sync_attach_reply>(proto::message_type::attach_sync, proto::empty_payload{});
      proto::sync_open_request open{};
      (void)proto::make_wire_name("left.open", open.name);
      open.kind = proto::sync_kind::lock;
      raw.call<proto::sync_open_reply>(proto::message_type::open_sync, open);
    }  // the connection closes; the process lives on
    const char done = 'x';
    if (::write(report, &done, 1) != 1) ::_exit(14);
    ::pause();
  });
  ASSERT_TRUE(leaver.done(5s));
  EXPECT_TRUE(daemon.wait_for_bytes_in_use(0, 1s)) << "host memory kept for a closed connection";
  const auto listed = watcher.sync_objects();
  ASSERT_EQ(listed.size(), 1u) << "the lock went with the connection, not with the process";
  EXPECT_EQ(listed[0].attached, 1u);
  leaver.kill();
  const auto deadline = clock_type::now() + 2s;
  while (!watcher.sync_objects().empty() && clock_type::now() < deadline) {
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_TRUE(watcher.sync_objects().empty()) << "the lock outlived its process";
}

}  // namespace
}  // namespace gpumem::testing
