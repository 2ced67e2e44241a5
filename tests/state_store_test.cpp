// The state store's folds (daemon/restart/state_store.hpp), in one process: the books, a
// notification socket of the test in the part of systemd's fd store, and a background whose
// jobs run when the test says. A fold's snapshot replaces the generation it was made from; a
// fold that fails, or that a whole snapshot overtook, replaces nothing; and the state read back
// from the store holds every object whichever happened.
#include "restart/state_store.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "gpumem/shared/os/memfd.hpp"
#include "support/host_pools.hpp"
#include "support/notify_receiver.hpp"
#include "systemd/notify.hpp"

namespace gpumem::daemon::restart {
namespace {

using namespace std::chrono_literals;

/// Keeps what is stored (FDSTORE=1), drops what is removed (FDSTOREREMOVE=1) and answers
/// barriers (BARRIER=1: the pipe sent closes), on a thread of its own as systemd would.
class fd_store {
 public:
  fd_store() : receiver_("gpumem-state-store-test"), thread_([this] { serve(); }) {}
  ~fd_store() {
    stopping_ = true;
    thread_.join();
  }

  /// @brief The snapshots and journals stored once every message sent before the call is
  /// handled.
  std::vector<std::string> state_files() const {
    EXPECT_FALSE(systemd::barrier(5s));
    const std::lock_guard lock(mutex_);
    std::vector<std::string> names;
    for (const auto& [name, fd] : stored_) {
      if (name.starts_with("state.") || name.starts_with("journal.")) names.push_back(name);
    }
    return names;
  }
  /// @brief Copies of what is stored, as systemd passes them to the next daemon.
  std::vector<systemd::passed_fd> passed() const {
    EXPECT_FALSE(systemd::barrier(5s));
    const std::lock_guard lock(mutex_);
    std::vector<systemd::passed_fd> copies;
    for (const auto& [name, fd] : stored_) {
      copies.push_back({name, unique_fd(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3))});
    }
    return copies;
  }

 private:
  void serve() {
    while (!stopping_) {
      testing::notify_receiver::message got = receiver_.receive(20ms);
      const auto name_at = got.text.find("FDNAME=");
      const std::string name = name_at == std::string::npos ? "" : got.text.substr(name_at + 7);
      const std::lock_guard lock(mutex_);
      if (got.text.starts_with("FDSTORE=1") && got.fds.size() == 1) {
        stored_.insert_or_assign(name, std::move(got.fds.front()));
      } else if (got.text.starts_with("FDSTOREREMOVE=1")) {
        stored_.erase(name);
      }
    }
  }

  testing::notify_receiver receiver_;
  mutable std::mutex mutex_;
  std::map<std::string, unique_fd> stored_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;  ///< last: starts once the members it uses exist
};

/// Holds each job until the test runs it (work, then done, on the test's thread) or fails it.
class held_jobs final : public background {
 public:
  void run(std::function<void()> work, std::function<void(std::exception_ptr)> done) override {
    jobs_.push_back({std::move(work), std::move(done)});
  }
  void after(std::chrono::milliseconds, std::function<void()>) override {
    FAIL() << "the state store sets no deadlines";
  }

  std::size_t waiting() const { return jobs_.size(); }
  void run_next() {
    job next = take();
    std::exception_ptr failure;
    try {
      next.work();
    } catch (...) {
      failure = std::current_exception();
    }
    next.done(failure);
  }
  void fail_next() {
    take().done(std::make_exception_ptr(std::runtime_error("no memory for the snapshot")));
  }

 private:
  struct job {
    std::function<void()> work;
    std::function<void(std::exception_ptr)> done;
  };
  job take() {
    job next = std::move(jobs_.front());
    jobs_.pop_front();
    return next;
  }
  std::deque<job> jobs_;
};

daemon_config config() {
  daemon_config made = embedded_default_config();
  made.pools.resize(1);
  made.pools[0].device = proto::kHostDevice;
  made.pools[0].size = 1ull << 30;
  return made;
}

/// Each object's size and holders, by id: what a read back must give again.
using object_summary =
    std::map<object_id, std::pair<std::uint64_t, std::map<client_id, std::uint32_t>>>;

object_summary summary_of(const books& state) {
  object_summary summary;
  for (const auto& [id, row] : state.rows.objects()) summary[id] = {row.bytes, row.holders};
  return summary;
}

class StateStore : public ::testing::Test {
 protected:
  StateStore() {
    // The test process stands for the client: alive, as its stored pidfd says to a read back.
    const unique_fd self(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));
    keeper.keep_process(client, self.get());
    keeper.start(state, false);
    keeper.fold_on(folds);
  }

  /// Allocates @p count buffers, writing the changes down after each (a request each).
  void allocate(std::size_t count, bool a_request_each = true) {
    for (std::size_t made = 0; made < count; ++made) {
      proto::allocate_request request{};
      request.size = 4096;
      request.device = proto::kHostDevice;
      state.memory.allocate(client, request);
      if (a_request_each) state.write_changes();
    }
  }
  /// Allocates, a request each, until a fold is waiting on the background.
  void allocate_until_a_fold_starts() {
    for (std::size_t made = 0; made < 100000 && folds.waiting() == 0; ++made) allocate(1);
    ASSERT_EQ(folds.waiting(), 1u);
  }
  /// The objects a daemon started with @p passed (what the store holds now) re-adopts.
  static object_summary objects_read_back(std::vector<systemd::passed_fd> passed) {
    state_store reader(std::move(passed));
    const books adopted(config(), host_pools, {}, {}, [&](books& into) { reader.adopt(into); });
    return summary_of(adopted);
  }
  object_summary objects_read_back() const { return objects_read_back(store.passed()); }
  /// Expects the store to hold the state files @p names, and a daemon started with them to
  /// read back the objects the books hold now.
  void expect_stored(const std::vector<std::string>& names) const {
    EXPECT_EQ(store.state_files(), names);
    EXPECT_EQ(objects_read_back(), summary_of(state));
  }

  fd_store store;  ///< first: $NOTIFY_SOCKET is set before the state store looks for it
  held_jobs folds;
  state_store keeper{std::vector<systemd::passed_fd>{}};
  books state{config(), host_pools};
  client_id client = state.add_client({::getpid(), ::getuid(), ::getgid(), {}});
};

TEST_F(StateStore, AFoldsSnapshotReplacesTheGenerationItWasMadeFrom) {
  ASSERT_TRUE(keeper.active());
  expect_stored({"journal.1", "state.1"});
  allocate_until_a_fold_starts();
  // The batches go on in the next journal, stored beside the generation being folded.
  allocate(10);
  expect_stored({"journal.1", "journal.2", "state.1"});
  folds.run_next();
  expect_stored({"journal.2", "state.2"});
  allocate(10);
  EXPECT_EQ(objects_read_back(), summary_of(state));
}

// A batch without room in the journal (here: many allocations in one turn) is written as a whole
// snapshot, past the fold under way, which is dropped when it comes back.
TEST_F(StateStore, AFoldThatAWholeSnapshotOvertookReplacesNothing) {
  allocate_until_a_fold_starts();
  allocate(20000, false);
  state.write_changes();
  expect_stored({"journal.3", "state.3"});
  folds.run_next();
  expect_stored({"journal.3", "state.3"});
  allocate(10);
  EXPECT_EQ(objects_read_back(), summary_of(state));
}

TEST_F(StateStore, AFoldThatFailedIsReplacedByAWholeSnapshotAtTheNextChange) {
  allocate_until_a_fold_starts();
  folds.fail_next();
  expect_stored({"journal.1", "journal.2", "state.1"});
  allocate(1);
  expect_stored({"journal.3", "state.3"});
}

// At a stop (SIGTERM) the store is left with one snapshot and its journal, as a daemon of an
// earlier version reads them, and no fold starts after it.
TEST_F(StateStore, AStopReplacesAFoldUnderWayWithAWholeSnapshot) {
  allocate_until_a_fold_starts();
  keeper.stop_folding();
  expect_stored({"journal.3", "state.3"});
  folds.run_next();
  expect_stored({"journal.3", "state.3"});
  allocate(2000);
  EXPECT_EQ(folds.waiting(), 0u);
  EXPECT_EQ(objects_read_back(), summary_of(state));
}

/// A state file no daemon can read.
systemd::passed_fd unreadable(const std::string& name) {
  unique_fd fd = os::make_empty_memfd("unreadable");
  EXPECT_EQ(::write(fd.get(), "not a state file", 16), 16);
  return {name, std::move(fd)};
}

// The snapshot a start writes is of a generation past every one passed, an unreadable one
// included: it never shares a name with a file the store still holds.
TEST_F(StateStore, ASnapshotWrittenAtTheStartIsPastEveryGenerationPassed) {
  allocate(10);
  std::vector<systemd::passed_fd> passed = store.passed();
  passed.push_back(unreadable("state.9"));
  state_store restarted(std::move(passed));
  books adopted(config(), host_pools, {}, {}, [&](books& into) { restarted.adopt(into); });
  restarted.start(adopted, true);
  EXPECT_EQ(store.state_files(), (std::vector<std::string>{"journal.10", "state.10"}));
  EXPECT_EQ(summary_of(adopted), summary_of(state));
}

// A journal of the next generation belongs to the snapshot before it only where no snapshot of
// its own was stored: beside one that cannot be read, the older snapshot is read with its own
// journal alone, never with a journal that follows another history.
TEST_F(StateStore, AnOlderSnapshotIsNotReadWithTheJournalOfANewerOne) {
  allocate(10);
  const object_summary before = summary_of(state);
  std::vector<systemd::passed_fd> first = store.passed();
  allocate(20000, false);  // a batch without room: a whole snapshot, generation 2
  state.write_changes();
  allocate(10);
  ASSERT_EQ(store.state_files(), (std::vector<std::string>{"journal.2", "state.2"}));
  std::vector<systemd::passed_fd> passed = store.passed();
  std::erase_if(passed, [](const systemd::passed_fd& each) { return each.name == "state.2"; });
  passed.push_back(unreadable("state.2"));
  for (systemd::passed_fd& each : first) {
    if (each.name == "state.1" || each.name == "journal.1") passed.push_back(std::move(each));
  }
  EXPECT_EQ(objects_read_back(std::move(passed)), before);
}

}  // namespace
}  // namespace gpumem::daemon::restart
