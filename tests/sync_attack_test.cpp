// Clients that misbehave on the raw protocol, as a hostile or careless process would (issue
// 11). One writes garbage into the shared sync page, then asks for a reset or dies: the daemon
// stays responsive, reports the object corrupt, and a reset makes it work again (finding 1).
// One closes its connection and lives on (finding 8).
#include <fcntl.h>
#include <grp.h>
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
#include "support/raw_client.hpp"
#include "support/temporary_file.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

/// How soon the daemon must answer others after an attack (issue 11).
constexpr auto kAnswerBound = 100ms;

enum class target { lock, barrier };
enum class afterwards { ask_for_reset, get_killed };

/// A request that must succeed: a forked child has nobody to tell of a failure but its exit
/// status.
template <class Reply, class Request>
raw_answer<Reply> must(raw_client& raw, proto::message_type type, const Request& request) {
  raw_answer<Reply> answer = raw.call<Reply>(type, request);
  if (answer.code != proto::errc::ok) ::_exit(11);
  return answer;
}

/// A connection that said hello, or the end of the forked child.
raw_client greeted(const std::string& path) {
  try {
    raw_client raw(path);
    if (raw.hello().code != proto::errc::ok) ::_exit(10);
    return raw;
  } catch (const std::exception&) {
    ::_exit(10);
  }
}

/// Tells @p report that the forked child did its part, then lives on until it is killed.
[[noreturn]] void report_done_and_live_on(int report) {
  const char done = 'x';
  if (::write(report, &done, 1) != 1) ::_exit(14);
  for (;;) ::pause();
}

/// The forked attacker: opens @p name, writes into its cell what no lock or barrier leaves
/// there, tells @p report, then asks for a reset (and reports the answer) or waits to die.
[[noreturn]] void attack(const std::string& socket_path, const std::string& name, target what,
                         afterwards then, int report) {
  raw_client raw = greeted(socket_path);
  const auto attach =
      must<proto::sync_attach_reply>(raw, proto::message_type::attach_sync, proto::empty_payload{});
  const proto::sync_attach_reply& attached = attach.reply;
  proto::sync_open_request open{};
  (void)proto::make_wire_name(name, open.name);
  open.kind = what == target::lock ? proto::sync_kind::lock : proto::sync_kind::barrier;
  open.parties = what == target::lock ? 0 : 2;
  const auto opened = must<proto::sync_open_reply>(raw, proto::message_type::open_sync, open).reply;
  // Made with the default mode, it is on the page attach_sync sent.
  if (opened.page != attached.page) ::_exit(15);
  void* page = ::mmap(nullptr, sync::kHostPageSize, PROT_READ | PROT_WRITE, MAP_SHARED,
                      attach.fds.at(0).get(), 0);
  if (page == MAP_FAILED) ::_exit(13);
  std::byte* cell =
      static_cast<std::byte*>(page) + sync::index_of_cell(opened.cell) * sync::kCellSize;
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
    must<proto::empty_payload>(raw, proto::message_type::reset_sync, reset);
  }
  report_done_and_live_on(report);
}

/// A forked child running @p body(report), which writes one byte to report when it is done.
/// The byte is the child's verdict where one is needed: reported() gives it.
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
    return ::poll(&ready, 1, static_cast<int>(within.count())) == 1 &&
           ::read(report_.get(), &reported_, 1) == 1;
  }
  char reported() const noexcept { return reported_; }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  unique_fd report_;
  char reported_ = 0;
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

/// Writes @p verdict to @p report and waits to be killed, keeping the connection open.
[[noreturn]] void say_and_wait(int report, char verdict) {
  if (::write(report, &verdict, 1) != 1) ::_exit(14);
  ::pause();
  ::_exit(0);
}

/// The other user's checks, each named by the letter it reports when it fails.
constexpr const char* kOtherUsersVerdicts =
    "k: all held; u: could not become uid 65534; o: its own lock is not on its own page; "
    "p: a page other than its own and the shared lock's was given (or one of those refused); "
    "s: another user's signal page was not refused as not_found; m: mmap failed; "
    "f: open_sync with kFlagSendPage sent a page with its own lock or a refused open, or none "
    "with the shared lock";

/// A client of uid 65534 (nobody), forked from root: attaches, opens a private lock and
/// @p shared_lock asking for their pages, tries to open @p private_lock of the owner, asks for
/// every page id it may guess and their signal pages, then writes ones into every word of its
/// own page, reports its verdict and waits to be killed.
[[noreturn]] void other_user(const std::string& socket_path, const std::string& shared_lock,
                             const std::string& private_lock_of_owner, int report) {
  const auto say = [report](char verdict) { say_and_wait(report, verdict); };
  constexpr uid_t kNobody = 65534;
  if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) say('u');
  raw_client raw = greeted(socket_path);
  auto attach =
      must<proto::sync_attach_reply>(raw, proto::message_type::attach_sync, proto::empty_payload{});
  const proto::sync_attach_reply& attached = attach.reply;
  const unique_fd own_page = std::move(attach.fds.at(0));
  proto::sync_open_request open{};
  open.kind = proto::sync_kind::lock;
  open.flags = proto::kFlagSendPage;
  (void)proto::make_wire_name("others.private", open.name);
  const auto private_open = must<proto::sync_open_reply>(raw, proto::message_type::open_sync, open);
  const auto& private_lock = private_open.reply;
  if (private_lock.page != attached.page) say('o');
  if (!private_open.fds.empty()) say('f');
  (void)proto::make_wire_name(private_lock_of_owner, open.name);
  const auto refused = raw.call<proto::sync_open_reply>(proto::message_type::open_sync, open);
  if (refused.code == proto::errc::ok || !refused.fds.empty()) say('f');
  (void)proto::make_wire_name(shared_lock, open.name);
  const auto shared_open = must<proto::sync_open_reply>(raw, proto::message_type::open_sync, open);
  const auto& shared = shared_open.reply;
  if (shared_open.fds.size() != 1) say('f');
  constexpr std::uint32_t kGuessedPages = 64;
  for (std::uint32_t page = 0; page < kGuessedPages; ++page) {
    const bool may_use = page == attached.page || page == shared.page;
    const proto::errc host_answer =
        raw.call<proto::sync_page_reply>(proto::message_type::get_sync_page,
                                         proto::sync_page_request{page, 0})
            .code;
    if (host_answer != (may_use ? proto::errc::ok : proto::errc::not_found)) say('p');
    const proto::errc signal_answer =
        raw.call<proto::signal_page_reply>(proto::message_type::get_signal_page,
                                           proto::signal_page_request{0, page})
            .code;
    if (!may_use && signal_answer != proto::errc::not_found) say('s');
  }
  void* page =
      ::mmap(nullptr, sync::kHostPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, own_page.get(), 0);
  if (page == MAP_FAILED) say('m');
  std::memset(page, 0xff, sync::kHostPageSize);
  say_and_wait(report, 'k');
}

// Issue 11, isolation of shared memory: sync state on pages per access class.
TEST(SyncPages, AnotherUserGetsNoPageOfAPrivateLockAndCorruptsOnlyItsOwn) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another uid";
  const gpumem::testing::temporary_file config(
      "gpumemd-sync-pages", "socket_mode: \"0666\"\naccess:\n  connect_users: [65534]\n");
  daemon_process daemon({"--config", config.path()});
  ::chmod(daemon.folder().c_str(), 0755);
  auto owner = daemon.connect("owner");
  auto mine = owner.lock("owners.private");
  auto shared = owner.lock("both.shared", {.mode = 0666u});
  forked_child other([&](int report) {
    other_user(daemon.socket_path(), "both.shared", "owners.private", report);
  });
  ASSERT_TRUE(other.done(10s)) << "the other user's client stopped before its verdict";
  EXPECT_EQ(other.reported(), 'k') << kOtherUsersVerdicts;

  EXPECT_LT(ping_time(owner), kAnswerBound);
  auto again = daemon.connect("again");
  auto same = again.lock("owners.private");
  mine.lock();
  EXPECT_FALSE(same.try_lock());
  mine.unlock();
  EXPECT_TRUE(same.try_lock());
  same.unlock();
  other.kill();
  EXPECT_TRUE(becomes_corrupt(owner, "others.private"))
      << "ones in every word of its page: the other user's own lock, cleaned up after its "
         "death, is corrupt";
  EXPECT_LT(ping_time(owner), kAnswerBound);
  for (const auto& each : owner.sync_objects()) {
    if (each.name == "owners.private" || each.name == "both.shared") {
      EXPECT_FALSE(each.corrupt) << each.name;
    }
  }
  EXPECT_TRUE(shared.try_lock());
  shared.unlock();
  mine.lock();
  mine.unlock();
}

/// Attaches @p raw to the lock pages and opens the lock @p name.
void open_lock(raw_client& raw, const char* name) {
  must<proto::sync_attach_reply>(raw, proto::message_type::attach_sync, proto::empty_payload{});
  proto::sync_open_request open{};
  (void)proto::make_wire_name(name, open.name);
  open.kind = proto::sync_kind::lock;
  must<proto::sync_open_reply>(raw, proto::message_type::open_sync, open);
}

/// The one lock that @p leaver's closed connection left stays, attached, while the process
/// lives, and goes once it is killed.
void expect_lock_kept_until_killed(Client& watcher, forked_child& leaver) {
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

// Issue 11, finding 8: a connection that closes while its process lives.
TEST(SyncLifetime, AClosedConnectionsHostMemoryIsLetGoAtOnceAndItsLockWhenItsProcessExits) {
  daemon_process daemon;
  auto watcher = daemon.connect("watcher");
  constexpr std::uint64_t kBytes = 64 << 20;
  forked_child leaver([&](int report) {
    {
      raw_client raw = greeted(daemon.socket_path());
      must<proto::allocation_reply>(raw, proto::message_type::allocate,
                                    proto::allocate_request{kBytes, kHost, 0, {}, {}});
      open_lock(raw, "left.open");
    }  // the connection closes; the process lives on
    report_done_and_live_on(report);
  });
  ASSERT_TRUE(leaver.done(5s));
  EXPECT_TRUE(daemon.wait_for_bytes_in_use(0, 1s)) << "host memory kept for a closed connection";
  expect_lock_kept_until_killed(watcher, leaver);
}

// The same when the connection closes with requests in flight: the daemon's replies then meet a
// closed socket (EPIPE), which is the same hang-up and must not let go of what the live process
// holds. Fewer requests than a client's share of a wake-up are answered before the daemon reads
// on (a failed reply there must end the reading too); more are answered at the wake-up's end.
TEST(SyncLifetime, AConnectionClosedWithRepliesInFlightKeepsItsLockUntilItsProcessExits) {
  for (const int in_flight : {4, 64}) {
    SCOPED_TRACE(std::to_string(in_flight) + " requests in flight");
    daemon_process daemon;
    auto watcher = daemon.connect("watcher");
    const pid_t daemon_pid = daemon.pid();
    forked_child leaver([&](int report) {
      {
        raw_client raw = greeted(daemon.socket_path());
        open_lock(raw, "left.in.flight");
        // The daemon sleeps while the requests go in and the connection closes: it finds them
        // with the hang-up, and its replies meet the closed socket (EPIPE), every time.
        if (::kill(daemon_pid, SIGSTOP) != 0) ::_exit(15);
        raw.send_unanswered(proto::message_type::ping, proto::empty_payload{}, in_flight);
      }  // the connection closes before the replies are read; the process lives on
      report_done_and_live_on(report);
    });
    const bool left = leaver.done(5s);
    ::kill(daemon_pid, SIGCONT);
    ASSERT_TRUE(left);
    std::this_thread::sleep_for(100ms);  // the daemon answers into the closed socket meanwhile
    expect_lock_kept_until_killed(watcher, leaver);
  }
}

// A client stopped for what it sent loses what it holds at once, though its process lives on:
// the refusal's reply meeting its closed socket (EPIPE) is not the hang-up of a live process,
// and the log says only that it was stopped.
TEST(SyncLifetime, AClientStoppedForABrokenFrameThatHungUpIsNotKeptForItsLiveProcess) {
  daemon_process daemon({}, /*readable_log=*/true);
  const pid_t daemon_pid = daemon.pid();
  forked_child stopped([&](int report) {
    {
      raw_client raw = greeted(daemon.socket_path());
      open_lock(raw, "left.broken");
      // The daemon sleeps while the broken header goes in and the connection closes: its
      // refusal meets the closed socket, every time.
      if (::kill(daemon_pid, SIGSTOP) != 0) ::_exit(15);
      const std::vector<std::byte> broken(sizeof(proto::header), std::byte{0xff});
      raw.send_bytes(broken);
    }
    report_done_and_live_on(report);
  });
  const bool sent = stopped.done(5s);
  ::kill(daemon_pid, SIGCONT);
  ASSERT_TRUE(sent);
  std::string log;
  ASSERT_TRUE(daemon.read_log_until("disconnected: sent a bad frame header", 5s, log)) << log;
  EXPECT_EQ(log.find("the rest kept until its process exits"), std::string::npos) << log;
  auto watcher = daemon.connect("watcher");
  EXPECT_TRUE(watcher.sync_objects().empty()) << "a stopped client's lock was kept";
}

}  // namespace
}  // namespace gpumem::testing
