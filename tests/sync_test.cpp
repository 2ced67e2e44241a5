// Locks, barriers and channels across real processes and a real gpumemd: exclusion, FIFO
// fairness, timeouts, SIGKILLed holders and parties, operator resets.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <future>
#include <thread>

#include "gpumem/events.hpp"
#include "gpumem/gpumem.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/gpumemctl_process.hpp"
#include "support/open_fds.hpp"
#include "support/raw_client.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

/// How soon a death must reach the others (issue: within 100 ms).
constexpr auto kDeathNoticeBound = 100ms;

child_process peer(const daemon_process& daemon, const std::vector<std::string>& args) {
  std::vector<std::string> argv{peer_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return child_process(argv, {daemon.socket_env()});
}

void expect_line(child_process& process, const std::string& prefix) {
  const auto line = process.read_line(60s);
  ASSERT_TRUE(line.has_value()) << "expected '" << prefix << "...', got nothing";
  EXPECT_TRUE(line->starts_with(prefix)) << "expected '" << prefix << "...', got '" << *line << "'";
}

/// @p processes peers that each take the lock "counter.lock" @p iterations times and increment
/// the plain counter in the buffer "counter" under it.
std::vector<child_process> lock_counters(const daemon_process& daemon, int processes,
                                         int iterations) {
  std::vector<child_process> workers;
  for (int i = 0; i < processes; ++i) {
    workers.push_back(
        peer(daemon, {"lock-count", "counter.lock", "counter", std::to_string(iterations)}));
  }
  return workers;
}

TEST(Lock, ProcessesIncrementAPlainCounterExactly) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto counter = client.allocate(4096, {.name = "counter"});
  constexpr int kProcesses = 4;
  constexpr int kIterations = 3000;
  auto workers = lock_counters(daemon, kProcesses, kIterations);
  for (auto& worker : workers) expect_line(worker, "done");
  EXPECT_EQ(*static_cast<const std::uint64_t*>(counter.data()),
            std::uint64_t{kProcesses} * kIterations);
}

TEST(Lock, ThreadsSharingOneLockObjectAndOtherProcessesIncrementACounterExactly) {
  // One Lock object used by several threads, as a std::mutex is: its inline fast path and its
  // slow path's guess of the free word race between them while other processes queue too.
  daemon_process daemon;
  auto client = daemon.connect();
  auto counter = client.allocate(4096, {.name = "counter"});
  auto& count = *static_cast<std::uint64_t*>(counter.data());
  constexpr int kProcesses = 2;
  constexpr int kThreads = 3;
  constexpr int kIterations = 3000;
  auto workers = lock_counters(daemon, kProcesses, kIterations);
  auto lock = client.lock("counter.lock");
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        // Every way in: the inline lock(), try_lock() and the timed acquire.
        if (t == 1 && i % 2 == 0) {
          if (!lock.try_lock()) lock.lock();
        } else if (t == 2 && i % 3 == 0) {
          while (lock.try_acquire_for(1ms) == LockStatus::timeout) {
          }
        } else {
          lock.lock();
        }
        ++count;
        lock.unlock();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& worker : workers) expect_line(worker, "done");
  EXPECT_EQ(count, std::uint64_t{kProcesses + kThreads} * kIterations);
}

TEST(Lock, TryLockAndTimeoutsLeaveTheQueueIntact) {
  daemon_process daemon;
  auto first = daemon.connect("first");
  auto second = daemon.connect("second");
  auto third = daemon.connect("third");
  auto held = first.lock("queue");
  auto other = second.lock("queue");
  auto late = third.lock("queue");
  held.lock();
  EXPECT_FALSE(other.try_lock());
  const auto started = clock_type::now();
  EXPECT_FALSE(other.try_lock_for(50ms));
  EXPECT_GE(clock_type::now() - started, 50ms);
  // A waiter that gave up leaves its place; the one behind it is served next.
  auto served = std::async(std::launch::async, [&] { return late.acquire(); });
  EXPECT_EQ(other.try_acquire_for(30ms), LockStatus::timeout);
  EXPECT_EQ(served.wait_for(20ms), std::future_status::timeout);
  held.unlock();
  ASSERT_EQ(served.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(served.get(), LockStatus::acquired);
  late.unlock();
  EXPECT_TRUE(other.try_lock());
  other.unlock();
}

TEST(Lock, UnlockWithoutHoldingIsRefused) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto lock = client.lock("never.held");
  try {
    lock.unlock();
    FAIL() << "unlock of a free lock succeeded";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::not_lock_owner) << error.what();
  }
  auto barrier = client.barrier("not.a.lock", 2);
  try {
    client.lock("not.a.lock");
    FAIL() << "a barrier's name was opened as a lock";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::already_exists) << error.what();
  }
}

/// In a child forked from the process that opened them: 0 when every use of @p lock,
/// @p barrier and @p channel (a producer) was refused as a forked child's, else the number of
/// the first use that was not.
int uses_refused_in_child(Lock& lock, Barrier& barrier, Channel& channel) {
  const std::vector<std::function<void()>> uses = {
      [&] { lock.lock(); },  // the inline fast path
      [&] { (void)lock.try_lock(); },
      [&] { (void)lock.try_acquire_for(10ms); },
      [&] { lock.unlock(); },
      [&] { (void)barrier.arrive(); },
      [&] { (void)channel.acquire_slot(); },
  };
  for (std::size_t use = 0; use < uses.size(); ++use) {
    try {
      uses[use]();
      return static_cast<int>(use) + 1;
    } catch (const Error& error) {
      if (error.status() != errc::invalid_argument ||
          std::string(error.what()).find("a forked child must") == std::string::npos) {
        return static_cast<int>(use) + 1;
      }
    }
  }
  return 0;
}

TEST(Lock, AForkedChildMayNotUseItsParentsLocksBarriersOrChannels) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto lock = client.lock("fork.lock");
  auto barrier = client.barrier("fork.barrier", 2);
  auto producer = client.channel("fork.channel", ChannelRole::producer,
                                 {.slots = 2, .slot_bytes = 64, .consumers = 1});
  // Taken and released once first, so that the fast path has its guess to copy.
  lock.lock();
  lock.unlock();
  const pid_t child = ::fork();
  if (child == 0) ::_exit(uses_refused_in_child(lock, barrier, producer));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(exit_code(status), 0) << "use number " << exit_code(status) << " went through";
  // Nothing of the parent's changed: its lock is free, its barrier waits for two parties.
  EXPECT_TRUE(daemon.connect().lock("fork.lock").try_lock());
  auto second = daemon.connect().barrier("fork.barrier", 2);
  auto other = std::async(std::launch::async, [&] { return second.arrive_and_wait(); });
  EXPECT_EQ(barrier.arrive_and_wait(), BarrierStatus::ok);
  EXPECT_EQ(other.get(), BarrierStatus::ok);
}

TEST(Lock, AKilledHolderHandsTheLockOnWithOwnerDied) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto lock = client.lock("robust");
  auto holder = peer(daemon, {"lock-hold", "robust"});
  expect_line(holder, "held");
  auto waiter = std::async(std::launch::async, [&] {
    const auto status = lock.acquire();
    return std::pair(status, clock_type::now());
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(waiter.wait_for(0ms), std::future_status::timeout);
  const auto killed_at = clock_type::now();
  holder.signal(SIGKILL);
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  const auto [status, acquired_at] = waiter.get();
  EXPECT_EQ(status, LockStatus::acquired_owner_died);
  EXPECT_LT(acquired_at - killed_at, kDeathNoticeBound);
  EXPECT_TRUE(lock.owner_died());

  // Released without repair: nobody may use it until an operator resets it.
  lock.unlock();
  try {
    lock.lock();
    FAIL() << "a lock released without mark_consistent() was acquired";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::not_recoverable) << error.what();
  }
  const auto listed = client.sync_objects();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0].not_recoverable);
  EXPECT_EQ(listed[0].owner_deaths, 1u);
  client.reset("robust");
  EXPECT_EQ(lock.acquire(), LockStatus::acquired);
  lock.unlock();
}

TEST(Lock, ALockClosedWhileHeldGoesToTheNextWaiterWithOwnerDied) {
  // A process that drops its last Lock of a name while holding it (a destructor, Python's
  // collector, an exit without unlock) can never release it: as at its death, the next holder
  // is told the owner died, and the process lives on with its slot.
  daemon_process daemon;
  auto stream = EventStream::open({.socket_path = daemon.socket_path()});
  auto waiting_client = daemon.connect();
  auto dropping_client = daemon.connect("dropper");
  auto held = std::make_unique<Lock>(dropping_client.lock("dropped"));
  ASSERT_EQ(held->acquire(), LockStatus::acquired);
  auto lock = waiting_client.lock("dropped");
  auto waiter = std::async(std::launch::async, [&] {
    const auto status = lock.acquire();
    return std::pair(status, clock_type::now());
  });
  const auto queued = [&](std::uint32_t count) {
    return eventually([&] {
      const auto listed = waiting_client.sync_objects();
      return listed.size() == 1 && listed[0].queued == count;
    });
  };
  ASSERT_TRUE(queued(1)) << "the waiter never queued";
  const auto closed_at = clock_type::now();
  held.reset();
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready) << "the dropped hold stays held";
  const auto [status, acquired_at] = waiter.get();
  EXPECT_EQ(status, LockStatus::acquired_owner_died);
  EXPECT_LT(acquired_at - closed_at, kDeathNoticeBound);
  std::optional<Event> told;
  while (!told) {
    const auto event = stream.next(2s);
    if (!event) break;
    if (event->kind == EventKind::owner_died) told = event;
  }
  ASSERT_TRUE(told.has_value()) << "no owner_died event";
  EXPECT_EQ(told->object, "dropped");
  EXPECT_EQ(told->label, "dropper");
  EXPECT_EQ(told->pid, static_cast<std::uint32_t>(::getpid()));
  EXPECT_EQ(told->reason, "closed its last Lock of the name while holding it");

  // Closed by its holder unrepaired, it goes on with the owner-died flag, as after a death.
  auto third_client = daemon.connect("third");
  auto third = third_client.lock("dropped");
  auto third_waits = std::async(std::launch::async, [&] { return third.acquire(); });
  ASSERT_TRUE(queued(1)) << "the third never queued";
  lock = Lock();
  ASSERT_EQ(third_waits.wait_for(5s), std::future_status::ready) << "the second dropped hold stays";
  EXPECT_EQ(third_waits.get(), LockStatus::acquired_owner_died);
  third.mark_consistent();
  third.unlock();

  // The clients that dropped their holds work on, each with a slot of its own.
  auto again = dropping_client.lock("dropped");
  auto other = waiting_client.lock("dropped");
  EXPECT_EQ(again.acquire(), LockStatus::acquired);
  auto other_waits = std::async(std::launch::async, [&] { return other.acquire(); });
  ASSERT_TRUE(queued(1)) << "the other never queued";
  EXPECT_EQ(other_waits.wait_for(0ms), std::future_status::timeout) << "two holders at once";
  again.unlock();
  ASSERT_EQ(other_waits.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(other_waits.get(), LockStatus::acquired);
  other.unlock();
}

TEST(Lock, ClosingOneOfAClientsTwoLocksOfTheNameKeepsItsHold) {
  // The holder is the client: while it has the name open, its hold stands.
  daemon_process daemon;
  auto holding_client = daemon.connect();
  auto first = holding_client.lock("twice");
  auto second = std::make_unique<Lock>(holding_client.lock("twice"));
  first.lock();
  second.reset();
  auto other_client = daemon.connect();
  auto other = other_client.lock("twice");
  EXPECT_EQ(other.try_acquire_for(200ms), LockStatus::timeout) << "the hold went with a close";
  first.unlock();
  EXPECT_EQ(other.try_acquire_for(5s), LockStatus::acquired);
  other.unlock();
}

TEST(Lock, AResetRefusesAPartyCountForALockOrBeyondTheMostParties) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto lock = client.lock("plain");
  auto barrier = client.barrier("met", 2);
  const auto refusal = [&](const char* name, std::uint32_t parties) {
    try {
      client.reset(name, parties);
    } catch (const Error& error) {
      EXPECT_EQ(error.status(), errc::invalid_argument) << error.what();
      return std::string(error.what());
    }
    return std::string("(reset)");
  };
  EXPECT_NE(refusal("plain", 2).find("'plain' is a lock: a party count is for barriers"),
            std::string::npos);
  EXPECT_NE(refusal("met", 1000).find("barrier 'met': 1000 parties: at most 120"),
            std::string::npos);
}

TEST(Lock, RepairedLockStaysUsable) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto lock = client.lock("repaired");
  auto holder = peer(daemon, {"lock-hold", "repaired"});
  expect_line(holder, "held");
  holder.signal(SIGKILL);
  ASSERT_TRUE(holder.wait());
  EXPECT_EQ(lock.acquire(), LockStatus::acquired_owner_died);
  lock.mark_consistent();
  EXPECT_FALSE(lock.owner_died());
  lock.unlock();
  EXPECT_EQ(lock.acquire(), LockStatus::acquired);
  lock.unlock();
}

TEST(Lock, AKilledHoldersLockKeepsItsStateWithNobodyHoldingIt) {
  // As a robust mutex in shared memory: the name stays with its owner-died state until the
  // lock is made consistent and let go, or reset.
  daemon_process daemon;
  auto holder = peer(daemon, {"lock-hold", "orphan"});
  expect_line(holder, "held");
  holder.signal(SIGKILL);
  ASSERT_TRUE(holder.wait());
  auto client = daemon.connect();
  const auto deadline = clock_type::now() + 2s;
  const auto shows_owner_died = [&] {
    const auto listed = client.sync_objects();
    return listed.size() == 1 && listed[0].owner_died && listed[0].attached == 0;
  };
  while (!shows_owner_died() && clock_type::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(shows_owner_died()) << "the lock went with its dead holder";
  const auto [shown, shown_code] = run_gpumemctl(daemon, {"locks", "--json"});
  EXPECT_NE(shown.find("\"owner died\""), std::string::npos) << shown;
  {
    auto lock = client.lock("orphan");
    EXPECT_EQ(lock.acquire(), LockStatus::acquired_owner_died);
    lock.unlock();  // without repair: not recoverable, and still kept once closed
  }
  const auto kept = client.sync_objects();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_TRUE(kept[0].not_recoverable);
  EXPECT_EQ(kept[0].attached, 0u);
  EXPECT_THROW(client.lock("orphan").lock(), Error);
  client.reset("orphan");
  EXPECT_TRUE(client.sync_objects().empty()) << "a reset lock nobody holds is gone";

  auto second = peer(daemon, {"lock-hold", "repaired.orphan"});
  expect_line(second, "held");
  second.signal(SIGKILL);
  ASSERT_TRUE(second.wait());
  {
    auto lock = client.lock("repaired.orphan");
    EXPECT_EQ(lock.acquire(), LockStatus::acquired_owner_died);
    lock.mark_consistent();
    lock.unlock();
  }
  EXPECT_TRUE(client.sync_objects().empty()) << "a consistent lock nobody holds is gone";
}

TEST(Lock, AResetRevokesTheHolderWhoseUnlockIsThenStale) {
  daemon_process daemon;
  auto first = daemon.connect("first");
  auto second = daemon.connect("second");
  auto stale = first.lock("revoked");
  auto next = second.lock("revoked");
  stale.lock();
  stale.unlock();
  stale.lock();  // through the inline fast path: the first lock() taught it the free word
  auto waiter = std::async(std::launch::async, [&] { return next.acquire(); });
  first.reset("revoked");
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(waiter.get(), LockStatus::acquired);
  EXPECT_THROW(stale.unlock(), Error);
  next.unlock();
}

// Issue 11: each access class has a page of its own, got when an object of it is opened and
// freed with its last object; a page id the daemon reuses for another class must not reach a
// mapping of the page it named before.
TEST(Lock, LocksOfOtherModesLiveOnPagesThatComeAndGo) {
  daemon_process daemon;
  auto first = daemon.connect("first");
  auto second = daemon.connect("second");
  auto own = first.lock("own");
  for (const unsigned mode : {0666u, 0660u, 0666u}) {
    const std::string name = "mode." + std::to_string(mode);
    auto mine = first.lock(name, {.mode = mode});
    auto theirs = second.lock(name);
    mine.lock();
    EXPECT_FALSE(theirs.try_lock());
    std::uint32_t holder = 0;
    for (const auto& each : first.sync_objects()) {
      if (each.name == name) holder = each.owner_pid;
    }
    EXPECT_EQ(holder, static_cast<std::uint32_t>(::getpid()))
        << "mode " << mode << ": the hold is not on the daemon's page";
    mine.unlock();
    EXPECT_TRUE(theirs.try_lock());
    theirs.unlock();
  }
  own.lock();
  own.unlock();
}

// Issue 15: open_sync's reply carries the page of a class other than the client's own, so
// opening such a lock is one round trip, not two; a copy of a page mapped already is closed.
TEST(Lock, OneOnAnotherClassesPageOpensInOneRoundTripAndLeavesNoDescriptor) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto own = client.lock("own");  // attached: its own page mapped
  const std::size_t fds_before = open_fds_of_this_process();
  auto first = client.lock("group.first", {.mode = 0660});  // the page comes with the reply
  first.lock();
  first.unlock();
  const std::size_t daemon_fds_before = daemon.open_fd_count();  // the new page's memfd
  std::vector<Lock> more;
  for (int i = 0; i < 50; ++i) {
    more.push_back(client.lock("group." + std::to_string(i), {.mode = 0660}));
    more.back().lock();
    more.back().unlock();
  }
  EXPECT_EQ(open_fds_of_this_process(), fds_before) << "copies of a mapped page were kept";
  // At most: the daemon may close a descriptor of its own meanwhile; a leak would be one an open.
  EXPECT_LE(daemon.open_fd_count(), daemon_fds_before);
  const std::string metrics = client.metrics();
  EXPECT_NE(metrics.find("_count{type=\"open_sync\"} 52"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("{type=\"get_sync_page\"}"), std::string::npos)
      << "a page was asked for after open_sync";
}

/// open_sync by hand: the lock @p name, with @p flags.
raw_answer<proto::sync_open_reply> open_lock(raw_client& raw, const std::string& name,
                                             std::uint32_t flags) {
  proto::sync_open_request open{};
  (void)proto::make_wire_name(name, open.name);
  open.kind = proto::sync_kind::lock;
  open.flags = flags;
  return raw.call<proto::sync_open_reply>(proto::message_type::open_sync, open);
}

ino_t inode_of(int fd) {
  struct stat status {};
  return ::fstat(fd, &status) == 0 ? status.st_ino : 0;
}

// open_sync by hand: the page goes with the reply only when asked (so a libgpumem from before
// kFlagSendPage gets the replies it expects), never for the client's own page or one it has an
// object open on, and it is the page get_sync_page hands over; unknown flags are still refused.
TEST(Lock, OpenSendsAPageOtherThanTheClientsOwnOnlyWhenAsked) {
  daemon_process daemon;
  raw_client raw(daemon.socket_path());
  const auto hello = raw.hello();
  ASSERT_EQ(hello.code, proto::errc::ok) << hello.text;
  EXPECT_NE(hello.reply.features & proto::kFeatureSendsSyncPage, 0u);
  const auto attached =
      raw.call<proto::sync_attach_reply>(proto::message_type::attach_sync, proto::empty_payload{});
  ASSERT_EQ(attached.code, proto::errc::ok) << attached.text;

  const auto own = open_lock(raw, "own", proto::kFlagSendPage);
  ASSERT_EQ(own.code, proto::errc::ok) << own.text;
  EXPECT_EQ(own.reply.page, attached.reply.page);
  EXPECT_TRUE(own.fds.empty()) << "the client's own page came again";

  const auto unasked = open_lock(raw, "group.unasked", proto::mode_flags(0660));
  ASSERT_EQ(unasked.code, proto::errc::ok) << unasked.text;
  EXPECT_NE(unasked.reply.page, attached.reply.page);
  EXPECT_TRUE(unasked.fds.empty()) << "a page went to a client that did not ask for it";
  const std::uint32_t group_asked = proto::mode_flags(0660) | proto::kFlagSendPage;
  EXPECT_TRUE(open_lock(raw, "group.mapped", group_asked).fds.empty())
      << "a page went to a client that has an object open on it";
  for (const char* name : {"group.unasked", "group.mapped"}) {
    proto::sync_close_request close{open_lock(raw, name, group_asked).reply.cell, 0};
    for (int times = 0; times < 2; ++times) {
      ASSERT_EQ(raw.call<proto::empty_payload>(proto::message_type::close_sync, close).code,
                proto::errc::ok);
    }
  }

  const auto asked = open_lock(raw, "group.asked", group_asked);
  ASSERT_EQ(asked.code, proto::errc::ok) << asked.text;
  EXPECT_NE(asked.reply.page, attached.reply.page);
  ASSERT_EQ(asked.fds.size(), 1u);
  const auto page = raw.call<proto::sync_page_reply>(proto::message_type::get_sync_page,
                                                     proto::sync_page_request{asked.reply.page, 0});
  ASSERT_EQ(page.code, proto::errc::ok) << page.text;
  ASSERT_EQ(page.fds.size(), 1u);
  EXPECT_EQ(inode_of(asked.fds.front().get()), inode_of(page.fds.front().get()))
      << "open_sync sent another page than get_sync_page does";

  const auto stray = open_lock(raw, "stray.bits", proto::kFlagSendPage | (1u << 28));
  EXPECT_EQ(stray.code, proto::errc::bad_message) << "flags beyond the known ones were taken";
}

TEST(Lock, ADomainIsFixedByTheFirstUse) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto lock = client.lock("host.only");
  lock.lock();
  lock.unlock();
  try {
    lock.device(0);
    FAIL() << "a host lock was handed to kernels";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::wrong_domain) << error.what();
  }
}

TEST(Gpumemctl, ShowsLocksAndResetsOneLeftByADeadHolder) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto kept_open = client.lock("shown");  // a lock lives while someone has it open
  auto holder = peer(daemon, {"lock-hold", "shown"});
  expect_line(holder, "held");
  const auto [held, held_code] = run_gpumemctl(daemon, {"locks"});
  EXPECT_EQ(held_code, 0);
  EXPECT_NE(held.find("shown"), std::string::npos) << held;
  EXPECT_NE(held.find(std::to_string(holder.pid())), std::string::npos) << held;
  holder.signal(SIGKILL);
  ASSERT_TRUE(holder.wait());
  const auto deadline = clock_type::now() + 2s;
  while (!client.sync_objects().at(0).owner_died && clock_type::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  const auto [died, died_code] = run_gpumemctl(daemon, {"locks", "--json"});
  EXPECT_NE(died.find("\"owner died\""), std::string::npos) << died;
  EXPECT_EQ(run_gpumemctl(daemon, {"reset", "shown"}).second, 0);
  EXPECT_FALSE(client.sync_objects().at(0).owner_died);
  EXPECT_EQ(run_gpumemctl(daemon, {"reset", "no.such.lock"}).second, 4) << "exit status: not found";
}

TEST(Barrier, ProcessesMeetEveryRound) {
  daemon_process daemon;
  auto client = daemon.connect();
  constexpr int kParties = 4;
  auto progress = client.allocate(4096, {.name = "progress"});
  std::vector<child_process> parties;
  for (int i = 0; i < kParties; ++i) {
    parties.push_back(
        peer(daemon, {"barrier-rounds", "rounds", std::to_string(kParties), "2000", "progress"}));
  }
  for (auto& party : parties) expect_line(party, "done");
}

TEST(Barrier, AKilledPartyBreaksItForEveryoneWaiting) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto first = client.barrier("breakable", 3);
  auto second = client.barrier("breakable", 3);
  auto doomed = peer(daemon, {"barrier-join", "breakable", "3"});
  expect_line(doomed, "ready 2");
  const auto token = first.arrive();
  second.arrive();
  auto waiter = std::async(std::launch::async, [&] {
    const auto status = first.wait(token);
    return std::pair(status, clock_type::now());
  });
  EXPECT_EQ(waiter.wait_for(50ms), std::future_status::timeout);
  const auto killed_at = clock_type::now();
  doomed.signal(SIGKILL);
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  const auto [status, returned_at] = waiter.get();
  EXPECT_EQ(status, BarrierStatus::broken);
  EXPECT_LT(returned_at - killed_at, kDeathNoticeBound);
  EXPECT_TRUE(second.broken());
  EXPECT_EQ(second.arrive_and_wait(), BarrierStatus::broken);

  // Re-formed with the two parties left.
  client.reset("breakable", 2);
  EXPECT_FALSE(first.broken());
  EXPECT_EQ(first.parties(), 2u) << "the handle does not say the parties the reset left";
  auto other = std::async(std::launch::async, [&] { return second.arrive_and_wait(); });
  EXPECT_EQ(first.arrive_and_wait(), BarrierStatus::ok);
  EXPECT_EQ(other.get(), BarrierStatus::ok);
}

/// What opening @p open says when it must be refused for a broken object: its text.
template <class Open>
std::string refusal_of(Open&& open) {
  try {
    open();
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::wrong_state) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "a party joined a broken object";
  return "";
}

TEST(Barrier, APlaceADeadOrLeavingPartyVacatedIsRefusedUntilAReset) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto stays = client.barrier("vacated", 3);
  auto doomed = peer(daemon, {"barrier-join", "vacated", "3"});
  expect_line(doomed, "ready");
  auto leaves = client.barrier("vacated", 3);
  doomed.signal(SIGKILL);
  ASSERT_TRUE(eventually([&] { return stays.broken(); })) << "the death broke nothing";
  leaves = Barrier{};
  // On the GPU the vacated party's count jumped ahead once; a newcomer that also left would
  // jump it again, far enough that stream waits on it read as behind and never end.
  const std::string refused = refusal_of([&] { client.barrier("vacated", 3); });
  EXPECT_NE(refused.find("barrier 'vacated' is broken"), std::string::npos) << refused;
  EXPECT_NE(refused.find("gpumemctl reset vacated --parties 3"), std::string::npos) << refused;

  client.reset("vacated", 3);
  EXPECT_FALSE(stays.broken());
  auto second = client.barrier("vacated", 3);
  auto third = client.barrier("vacated", 3);
  auto others = std::async(std::launch::async, [&] {
    const auto token = second.arrive();
    const BarrierStatus third_saw = third.arrive_and_wait();
    return std::pair(third_saw, second.wait(token));
  });
  EXPECT_EQ(stays.arrive_and_wait(), BarrierStatus::ok);
  EXPECT_EQ(others.get(), std::pair(BarrierStatus::ok, BarrierStatus::ok));
}

/// A gpumemd, a client of it, and channel @p name's producer and its one consumer, opened by
/// that client, with 64-byte slots.
struct one_consumer_channel {
  one_consumer_channel(const std::string& name, std::uint32_t slots)
      : client(daemon.connect()),
        options{.slots = slots, .slot_bytes = 64, .consumers = 1},
        producer(client.channel(name, ChannelRole::producer, options)),
        consumer(client.channel(name, ChannelRole::consumer, options)) {}
  daemon_process daemon;
  Client client;
  ChannelOptions options;
  Channel producer;
  Channel consumer;
};

TEST(Channel, AConsumerPlaceVacatedByALeaverIsRefusedUntilAReset) {
  one_consumer_channel left("left", 2);
  auto& [daemon, client, options, producer, consumer] = left;
  consumer = Channel{};
  EXPECT_TRUE(producer.broken());
  const std::string refused =
      refusal_of([&] { client.channel("left", ChannelRole::consumer, options); });
  EXPECT_NE(refused.find("channel 'left' is broken"), std::string::npos) << refused;

  client.reset("left", 2);
  consumer = client.channel("left", ChannelRole::consumer, options);
  const auto slot = producer.acquire_slot();
  ASSERT_EQ(slot.status, BarrierStatus::ok);
  std::memset(slot.data, 7, 64);
  producer.publish();
  const auto item = consumer.acquire();
  ASSERT_EQ(item.status, BarrierStatus::ok);
  EXPECT_EQ(static_cast<const unsigned char*>(item.data)[63], 7);
  consumer.release();
}

// Two slots of 64 bytes and four of 32 fill the same buffer: a consumer that cut them otherwise
// would read every item at the wrong offset. The daemon keeps the first opener's layout and
// refuses another before the opener takes a place, so the channel goes on unbroken.
TEST(Channel, AConsumerThatCutsTheSlotsOtherwiseIsRefusedAndTheChannelGoesOn) {
  daemon_process daemon;
  auto client = daemon.connect();
  const ChannelOptions options{.slots = 2, .slot_bytes = 64, .consumers = 2};
  auto producer = client.channel("cut", ChannelRole::producer, options);
  ChannelOptions other_cut = options;
  other_cut.slots = 4;
  other_cut.slot_bytes = 32;
  try {
    client.channel("cut", ChannelRole::consumer, other_cut);
    ADD_FAILURE() << "a consumer of four 32-byte slots joined a channel of two 64-byte ones";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::invalid_argument);
    EXPECT_NE(std::string(error.what())
                  .find("channel 'cut' has 2 slots of 64 bytes, not 4 slots of 32 bytes"),
              std::string::npos)
        << error.what();
  }
  EXPECT_FALSE(producer.broken()) << "the refused consumer broke the channel";
  // Both consumer places are still free: the refused opener took none.
  auto first = client.channel("cut", ChannelRole::consumer, options);
  auto second = client.channel("cut", ChannelRole::consumer, options);
  for (unsigned char item = 1; item <= 3; ++item) {
    const auto slot = producer.acquire_slot();
    ASSERT_EQ(slot.status, BarrierStatus::ok);
    std::memset(slot.data, item, 64);
    producer.publish();
    for (Channel* consumer : {&first, &second}) {
      const auto got = consumer->acquire();
      ASSERT_EQ(got.status, BarrierStatus::ok);
      EXPECT_EQ(static_cast<const unsigned char*>(got.data)[63], item);
      consumer->release();
    }
  }
}

// A producer of an earlier libgpumem opens with open_sync, naming no layout. The consumer that
// joins it first might be the one that cut the slots wrongly: were its layout kept, the right
// consumers after it would be refused. So a channel not formed by openers that named their
// layouts checks nobody, as before.
TEST(Channel, AChannelWithAnUncheckedPartyHoldsNobodyToTheLayoutOfALaterOpener) {
  daemon_process daemon;
  raw_client earlier(daemon.socket_path());
  ASSERT_EQ(earlier.hello().code, proto::errc::ok);
  ASSERT_EQ(
      earlier
          .call<proto::sync_attach_reply>(proto::message_type::attach_sync, proto::empty_payload{})
          .code,
      proto::errc::ok);
  proto::sync_open_request producer{};
  (void)proto::make_wire_name("mixed", producer.name);
  producer.kind = proto::sync_kind::channel;
  producer.parties = 3;
  producer.role = proto::sync_role::producer;
  const auto opened =
      earlier.call<proto::sync_open_reply>(proto::message_type::open_sync, producer);
  ASSERT_EQ(opened.code, proto::errc::ok) << opened.text;

  auto client = daemon.connect();
  auto wrongly_cut = client.channel("mixed", ChannelRole::consumer,
                                    {.slots = 4, .slot_bytes = 32, .consumers = 2});
  try {
    auto rightly_cut = client.channel("mixed", ChannelRole::consumer,
                                      {.slots = 2, .slot_bytes = 64, .consumers = 2});
  } catch (const Error& error) {
    ADD_FAILURE() << "the first consumer's layout was held against the next: " << error.what();
  }
}

TEST(Barrier, WaitForTimesOutAndPartiesAreCounted) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto only = client.barrier("pair", 2);
  EXPECT_EQ(only.wait_for(only.arrive(), 20ms), BarrierStatus::timeout);
  auto second = client.barrier("pair", 2);
  try {
    client.barrier("pair", 2);
    FAIL() << "a third party joined a barrier of two";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::no_party_left) << error.what();
  }
  EXPECT_THROW(client.barrier("pair", 3), Error);
}

TEST(Channel, AHundredThousandItemsArriveCompleteAndInOrderAtEveryConsumer) {
  daemon_process daemon;
  const std::vector<std::string> shape{"100000", "2", "8", "256"};
  auto with = [&](const char* command) {
    std::vector<std::string> args{command, "frames"};
    args.insert(args.end(), shape.begin(), shape.end());
    return peer(daemon, args);
  };
  auto first = with("channel-consume");
  auto second = with("channel-consume");
  auto producer = with("channel-produce");
  expect_line(producer, "done");
  expect_line(first, "ok 100000");
  expect_line(second, "ok 100000");
}

TEST(Channel, ABatchOfNoItemsOrMoreThanTheSlotsOrThanHeldIsRefusedByName) {
  one_consumer_channel batches("batches", 4);
  auto& [daemon, client, options, producer, consumer] = batches;
  const auto refused = [](auto&& call, const char* rule) {
    try {
      call();
      ADD_FAILURE() << "not refused: " << rule;
    } catch (const Error& error) {
      EXPECT_EQ(error.status(), errc::invalid_argument);
      EXPECT_NE(std::string(error.what()).find("channel 'batches'"), std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find(rule), std::string::npos) << error.what();
    }
  };
  // Checked before any CUDA call: the same refusals where there is no GPU.
  refused([&] { producer.acquire_slot(nullptr, 0); }, "a count of 0 items");
  refused([&] { consumer.acquire(nullptr, 5); }, "1 to 4 (the channel's slots)");
  refused([&] { consumer.release(nullptr, 1); }, "no slot is held");
  // The host forms hold one item: a batched release of two is more than held.
  const auto slot = producer.acquire_slot();
  refused([&] { producer.publish(nullptr, 2); }, "1 to 1 (the items held)");
  EXPECT_EQ(producer.slot_data(slot.sequence), slot.data);
  EXPECT_EQ(producer.slot_data(slot.sequence + 4), slot.data) << "the ring wraps";
}

TEST(Channel, AShapeWithNoSlotsOrTooManyIsRefusedByNameBeforeAnythingIsMade) {
  daemon_process daemon;
  auto client = daemon.connect();
  for (const std::uint32_t slots : {0u, (1u << 24) + 1}) {
    try {
      client.channel("shaped", ChannelRole::producer, {.slots = slots, .slot_bytes = 1});
      ADD_FAILURE() << "a ring of " << slots << " slots was made";
    } catch (const Error& error) {
      EXPECT_EQ(error.status(), errc::invalid_argument);
      EXPECT_NE(std::string(error.what()).find("channel 'shaped'"), std::string::npos);
      EXPECT_NE(std::string(error.what()).find("at most 16777216 slots"), std::string::npos)
          << error.what();
    }
  }
  // Slots whose bytes overflow 64 bits: the product would wrap to a 16-byte buffer.
  try {
    client.channel("shaped", ChannelRole::producer,
                   {.slots = 2, .slot_bytes = (std::size_t{1} << 63) + 8});
    ADD_FAILURE() << "a ring of more bytes than 64 bits count was made";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("channel 'shaped': 2 slots of"), std::string::npos)
        << error.what();
  }
  EXPECT_THROW(client.open("shaped.slots"), Error) << "the refused channel left its slots";
  EXPECT_NO_THROW(
      client.channel("shaped", ChannelRole::producer, {.slots = 1u << 24, .slot_bytes = 1}));
}

TEST(Channel, AKilledConsumerBreaksTheProducer) {
  daemon_process daemon;
  auto client = daemon.connect();
  const ChannelOptions options{.slots = 2, .slot_bytes = 64, .consumers = 1};
  auto producer = client.channel("stalled", ChannelRole::producer, options);
  auto consumer = peer(daemon, {"channel-consume", "stalled", "1000000", "1", "2", "64"});
  for (int item = 0; item < 2; ++item) {
    const auto slot = producer.acquire_slot();
    ASSERT_EQ(slot.status, BarrierStatus::ok);
    std::memset(slot.data, 0, 64);  // not the pattern: the consumer stops at item 0
    producer.publish();
  }
  expect_line(consumer, "mismatch 0");
  consumer.wait();
  EXPECT_EQ(producer.acquire_slot().status, BarrierStatus::broken);
  EXPECT_TRUE(producer.broken());
}

}  // namespace
}  // namespace gpumem::testing
