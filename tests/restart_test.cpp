// Restart without loss: a real gpumemd under a stand-in for systemd (support/systemd_supervisor)
// keeps its state in the fd store; it is SIGKILLed (also in the middle of requests and of
// writing its snapshot) and started again with what the store kept, while real client processes
// hold buffers, locks and barrier places.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "gpumem/events.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "gpumem/sync.hpp"
#include "restart/journal.hpp"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/metric_value.hpp"
#include "support/open_fds.hpp"
#include "support/pattern.hpp"
#include "support/raw_client.hpp"
#include "support/systemd_supervisor.hpp"
#include "support/temporary_file.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kSize = 1 << 20;

child_process peer(const systemd_supervisor& daemon, const std::vector<std::string>& args,
                   std::vector<std::string> env = {}) {
  std::vector<std::string> argv{peer_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  env.push_back(daemon.socket_env());
  return child_process(argv, env);
}

std::string ready(child_process& child) {
  const auto line = child.read_line();
  return line.value_or("(nothing)");
}

std::uint64_t host_bytes_in_use(gpumem::Client& client) {
  std::uint64_t total = 0;
  for (const auto& each : client.stats().pools) {
    if (each.device == gpumem::kHost) total += each.bytes_in_use;
  }
  return total;
}

/// Whether a new host allocation of kSize bytes reads zeroes in every byte.
bool allocates_zeroes(gpumem::Client& client) {
  auto fresh = client.allocate(kSize);
  const auto* bytes = static_cast<const unsigned char*>(fresh.data());
  return std::count(bytes, bytes + kSize, 0) == static_cast<std::ptrdiff_t>(kSize);
}

bool opens(gpumem::Client& client, const std::string& name) {
  try {
    client.open(name);
    return true;
  } catch (const gpumem::Error& error) {
    EXPECT_EQ(error.status(), gpumem::errc::not_found) << error.what();
    return false;
  }
}

TEST(Restart, StatusSaysWhetherStateIsKept) {
  systemd_supervisor kept({});
  kept.start();
  EXPECT_TRUE(kept.connect().stats().state_kept);
  daemon_process plain;
  EXPECT_FALSE(plain.connect().stats().state_kept);
}

TEST(Restart, NamedBufferKeepsItsBytesAndHoldersThroughASigkill) {
  systemd_supervisor daemon({});
  daemon.start();
  auto holder = peer(daemon, {"hold-new", "weights", std::to_string(kSize), "7"});
  ASSERT_TRUE(ready(holder).starts_with("ready")) << daemon.log_tail();

  daemon.restart(SIGKILL);
  auto client = daemon.connect("after");
  auto weights = client.open("weights");
  ASSERT_EQ(weights.size(), kSize);
  EXPECT_EQ(first_mismatch(weights.data(), kSize, 7), kSize);
  const auto listed = client.allocations();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].holders, 2u);  // the peer from before, and this client
  EXPECT_EQ(host_bytes_in_use(client), kSize);

  // The peer is still the owner: when it goes, only this client's reference is left.
  holder.signal(SIGKILL);
  holder.wait();
  ASSERT_TRUE(daemon.wait_for([&] { return client.allocations().at(0).holders == 1; }, 1s));
}

// A pool taken out of the configuration across a restart keeps what its clients hold: read as
// before, it takes nothing new, and its instance closes once the last holder lets go.
TEST(Restart, APoolTakenOutOfTheConfigurationServesWhatItHeldAndTakesNothingNew) {
  const temporary_file two_pools("gpumemd-two-pools",
                                 "pools:\n  - {name: host, device: host, size: 16MiB}\n"
                                 "  - {name: scratch, device: host, size: 16MiB}\n");
  const temporary_file one_pool("gpumemd-one-pool",
                                "pools:\n  - {name: host, device: host, size: 16MiB}\n");
  systemd_supervisor daemon({.args = {"--config", two_pools.path()}});
  daemon.start();
  auto client = daemon.connect("holder");
  auto kept = client.allocate(kSize, {.name = "kept", .pool = "scratch"});
  fill_pattern(kept.data(), kSize, 5);

  daemon.set_args({"--config", one_pool.path()});
  daemon.restart(SIGKILL);
  auto reader = daemon.connect("reader");
  auto seen = reader.open("kept");
  EXPECT_EQ(first_mismatch(seen.data(), kSize, 5), kSize);
  try {
    reader.allocate(4096, {.pool = "scratch"});
    ADD_FAILURE() << "a pool no longer configured took an allocation";
  } catch (const gpumem::Error& error) {
    EXPECT_EQ(error.status(), gpumem::errc::not_found);
    EXPECT_NE(std::string(error.what()).find("pool 'scratch' is no longer configured"),
              std::string::npos)
        << error.what();
  }
  reader.allocate(4096);  // the configured pool serves as before

  // Its one instance, kept in the store under its id until it holds nothing; then closed, and
  // the pool is no longer listed.
  const auto scratch = [&]() -> std::optional<PoolStats> {
    for (const PoolStats& each : reader.stats().pools) {
      if (each.name == "scratch") return each;
    }
    return std::nullopt;
  };
  ASSERT_TRUE(scratch().has_value());
  EXPECT_EQ(scratch()->bytes_in_use, kSize);
  const std::string instance = "pool." + std::to_string(scratch()->id);
  const auto instance_kept = [&] {
    return std::ranges::count(daemon.stored_names(), instance) == 1;
  };
  EXPECT_TRUE(instance_kept());
  seen = gpumem::Buffer();
  kept = gpumem::Buffer();  // released through the resumed session
  EXPECT_TRUE(daemon.wait_for([&] { return !instance_kept(); }, 5s)) << daemon.log_tail();
  EXPECT_FALSE(scratch().has_value());
}

/// A client holds "orphaned" (kSize bytes of pattern 3) and dies while no daemon runs; the
/// daemon is left stopped.
void orphan_while_stopped(systemd_supervisor& daemon) {
  daemon.start();
  auto holder = peer(daemon, {"hold-new", "orphaned", std::to_string(kSize), "3"});
  ASSERT_TRUE(ready(holder).starts_with("ready"));
  daemon.kill(SIGKILL);
  holder.signal(SIGKILL);
  holder.wait();
}

TEST(Restart, WhatAClientThatDiedWhileNoDaemonRanHeldIsFreed) {
  systemd_supervisor daemon({});
  ASSERT_NO_FATAL_FAILURE(orphan_while_stopped(daemon));
  daemon.start();
  auto client = daemon.connect();
  EXPECT_FALSE(opens(client, "orphaned"));
  EXPECT_EQ(host_bytes_in_use(client), 0u);
  // Counted as a death while the daemon runs would have been, not as a client taken over.
  const std::string metrics = client.metrics();
  EXPECT_EQ(metric_value(metrics, "gpumemd_departures_total{how=\"died\"}"), 1) << metrics;
  EXPECT_EQ(metric_value(metrics, "gpumemd_reclaimed_bytes_total"), kSize) << metrics;
  EXPECT_EQ(metric_value(metrics, "gpumemd_reclaimed_objects_total"), 1) << metrics;
  EXPECT_EQ(metric_value(metrics, "gpumemd_readopted_clients"), 0) << metrics;
}

// The fd store out of reach (here its notify socket moved away): writes fail, and gpumemd says
// that what it tells is not kept; once a write succeeds again (a whole snapshot), it is, and
// a SIGKILL then loses nothing that was told meanwhile.
TEST(Restart, AFailedStateWriteIsShownUntilAWriteSucceedsAndLosesNothingAfter) {
  systemd_supervisor daemon({});
  daemon.start();
  auto client = daemon.connect();
  auto before = client.allocate(4096, {.name = "before"});
  ASSERT_TRUE(client.stats().state_kept);
  const std::string folder = daemon.socket_path().substr(0, daemon.socket_path().rfind('/'));
  const std::string notify = folder + "/notify.sock";
  const std::string moved = folder + "/notify.moved";
  ASSERT_EQ(::rename(notify.c_str(), moved.c_str()), 0);
  // A new client's pidfd is a descriptor to store: the write fails.
  auto newcomer = daemon.connect("newcomer");
  auto meanwhile = newcomer.allocate(4096, {.name = "meanwhile"});
  const Stats failing = client.stats();
  const std::string metrics = client.metrics();
  ASSERT_EQ(::rename(moved.c_str(), notify.c_str()), 0);
  EXPECT_FALSE(failing.state_kept);
  EXPECT_EQ(metric_value(metrics, "gpumemd_state_kept"), 0) << metrics;
  EXPECT_GE(metric_value(metrics, "gpumemd_state_write_failures_total"), 1) << metrics;

  auto after = client.allocate(4096, {.name = "after"});
  EXPECT_TRUE(client.stats().state_kept);
  // What it asked systemd to keep, which no notification tells it: the store's size here.
  const double asked = metric_value(client.metrics(), "gpumemd_state_descriptors");
  // A removal has no barrier: the store may take a moment to drop what the daemon let go.
  EXPECT_TRUE(
      daemon.wait_for([&] { return static_cast<double>(daemon.stored_count()) == asked; }, 2s))
      << asked << " asked for, " << daemon.stored_count() << " stored";
  daemon.restart(SIGKILL);
  for (const char* name : {"before", "meanwhile", "after"}) {
    EXPECT_TRUE(opens(client, name)) << name << " was lost";
  }
}

TEST(Restart, EventNumbersGoOnAfterTheRestartSoAReaderSeesWhatItMissedAsAGap) {
  systemd_supervisor daemon({});
  daemon.start();
  std::uint64_t before = 0;
  {
    auto stream = EventStream::open({.socket_path = daemon.socket_path()});
    daemon.connect("before").ping();
    const auto event = stream.next(10s);
    ASSERT_TRUE(event.has_value());
    before = event->sequence;
  }
  daemon.restart(SIGKILL);
  auto stream = EventStream::open({.socket_path = daemon.socket_path()});
  daemon.connect("after").ping();
  const auto event = stream.next(10s);
  ASSERT_TRUE(event.has_value());
  EXPECT_GT(event->sequence, before) << "numbering started over after the restart";
}

TEST(Restart, AnEventStreamsRowGoesWithTheRestartWhileAHoldersRowStaysForItsResume) {
  systemd_supervisor daemon({});
  daemon.start();
  // Both in this process, which lives on: only the one that holds something can resume.
  auto stream = EventStream::open({.socket_path = daemon.socket_path(), .label = "reader"});
  auto holder = daemon.connect("holder");
  auto buffer = holder.allocate(kSize, {.name = "held"});
  daemon.restart(SIGKILL);
  auto observer = daemon.connect("observer");
  std::vector<std::string> labels;
  for (const ClientInfo& each : observer.clients()) labels.push_back(each.label);
  EXPECT_EQ(std::ranges::count(labels, "holder"), 1) << "the holder's row waits for its resume";
  EXPECT_EQ(std::ranges::count(labels, "reader"), 0)
      << "a stream is never resumed: its row stayed until its process exits";
  const std::string metrics = observer.metrics();
  EXPECT_EQ(metric_value(metrics, "gpumemd_readopted_clients"), 1) << metrics;
  EXPECT_EQ(metric_value(metrics, "gpumemd_departures_total{how=\"disconnected\"}"), 1) << metrics;
  // What it was sent before the restart, then its end: it does not go on.
  EXPECT_THROW(
      {
        while (stream.next(10s)) {
        }
      },
      Error);
}

TEST(Restart, AHostRangeFreedAtTheStartIsZeroedBeforeAnotherRestartPlacesItAgain) {
  systemd_supervisor daemon({});
  ASSERT_NO_FATAL_FAILURE(orphan_while_stopped(daemon));
  // This start lets the dead client's range go, and no client comes before the next crash:
  // the state it wrote down says the range is free, so its pages must be gone by then.
  daemon.start();
  daemon.kill(SIGKILL);
  daemon.start();
  auto client = daemon.connect();
  EXPECT_TRUE(allocates_zeroes(client)) << "a new allocation reads the dead client's bytes";
}

TEST(Restart, FreeHostMemoryIsZeroedAtTheRestartWhateverThePoolsMemfdHeld) {
  systemd_supervisor daemon({});
  daemon.start();
  daemon.kill(SIGKILL);
  // Bytes in free space of the stored pool, as a daemon that could not punch a freed range
  // leaves them: the records call that range free.
  const int pool = daemon.stored_descriptor("pool.0");
  ASSERT_GE(pool, 0) << "the host pool's memfd is stored as pool.0";
  const std::vector<unsigned char> old_bytes(kSize, 0x5a);
  ASSERT_EQ(::pwrite(pool, old_bytes.data(), kSize, 0), static_cast<ssize_t>(kSize));
  daemon.start();
  auto client = daemon.connect();
  EXPECT_TRUE(allocates_zeroes(client)) << "a new allocation reads what the memfd held";
}

TEST(Restart, AClientThatDiesAfterTheRestartIsReclaimedWithinASecond) {
  systemd_supervisor daemon({});
  daemon.start();
  auto holder = peer(daemon, {"hold-new", "-", std::to_string(kSize), "5"});
  ASSERT_TRUE(ready(holder).starts_with("ready"));
  daemon.restart(SIGKILL);
  auto client = daemon.connect();
  EXPECT_EQ(host_bytes_in_use(client), kSize);
  holder.signal(SIGKILL);
  holder.wait();
  EXPECT_TRUE(daemon.wait_for([&] { return host_bytes_in_use(client) == 0; }, 1s));
}

TEST(Restart, ALockHeldAcrossTheRestartStaysHeldAndItsOwnersDeathIsNoticed) {
  systemd_supervisor daemon({});
  daemon.start();
  auto holder = peer(daemon, {"lock-hold", "kept.lock"});
  ASSERT_EQ(ready(holder), "held");
  daemon.restart(SIGKILL);

  auto client = daemon.connect();
  auto lock = client.lock("kept.lock");
  EXPECT_FALSE(lock.try_lock()) << "the holder from before the restart lost its lock";
  holder.signal(SIGKILL);
  holder.wait();
  ASSERT_TRUE(lock.try_lock_for(2s));
  EXPECT_TRUE(lock.owner_died());
  lock.mark_consistent();
  lock.unlock();
}

TEST(Restart, BarrierPlacesTakenBeforeTheRestartStayTaken) {
  systemd_supervisor daemon({});
  daemon.start();
  auto joined = peer(daemon, {"barrier-join", "kept.barrier", "2"});
  ASSERT_TRUE(ready(joined).starts_with("ready"));
  daemon.restart(SIGKILL);

  auto first = daemon.connect();
  auto second = daemon.connect();
  auto barrier = first.barrier("kept.barrier", 2);
  try {
    second.barrier("kept.barrier", 2);
    ADD_FAILURE() << "a third party joined a barrier of two";
  } catch (const gpumem::Error& error) {
    EXPECT_EQ(error.status(), gpumem::errc::no_party_left) << error.what();
  }
}

TEST(Restart, AChannelKeepsItsSlotLayoutThroughASigkill) {
  systemd_supervisor daemon({});
  daemon.start();
  auto owner = daemon.connect();
  const gpumem::ChannelOptions options{.slots = 2, .slot_bytes = 64, .consumers = 1};
  auto producer = owner.channel("kept.ring", gpumem::ChannelRole::producer, options);
  daemon.restart(SIGKILL);

  auto client = daemon.connect();
  try {
    client.channel("kept.ring", gpumem::ChannelRole::consumer,
                   {.slots = 4, .slot_bytes = 32, .consumers = 1});
    ADD_FAILURE() << "the restart forgot the channel's slot layout";
  } catch (const gpumem::Error& error) {
    EXPECT_EQ(error.status(), gpumem::errc::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("has 2 slots of 64 bytes"), std::string::npos)
        << error.what();
  }
  auto consumer = client.channel("kept.ring", gpumem::ChannelRole::consumer, options);
  EXPECT_FALSE(producer.broken()) << "the refused consumer broke the channel";
}

TEST(Restart, ABrokenBarrierTakesNoNewcomerAfterTheRestartEither) {
  systemd_supervisor daemon({});
  daemon.start();
  auto stays = peer(daemon, {"barrier-join", "kept.broken", "3"});
  ASSERT_TRUE(ready(stays).starts_with("ready"));
  auto doomed = peer(daemon, {"barrier-join", "kept.broken", "3"});
  ASSERT_TRUE(ready(doomed).starts_with("ready"));
  doomed.signal(SIGKILL);
  doomed.wait();
  const auto refused = [&](gpumem::Client& client) {
    try {
      client.barrier("kept.broken", 3);
      return false;
    } catch (const gpumem::Error& error) {
      EXPECT_EQ(error.status(), gpumem::errc::wrong_state) << error.what();
      return true;
    }
  };
  const auto broken = [](gpumem::Client& client) {
    const auto listed = client.sync_objects();
    return listed.size() == 1 && listed[0].broken;
  };
  {
    auto client = daemon.connect();
    ASSERT_TRUE(eventually([&] { return broken(client); })) << "the death broke nothing";
  }
  daemon.restart(SIGKILL);
  auto client = daemon.connect();
  EXPECT_TRUE(broken(client)) << "the restart forgot that the barrier broke";
  EXPECT_TRUE(refused(client)) << "a newcomer took the dead party's place after the restart";
}

TEST(Restart, SigtermZeroesNothingALiveClientMaps) {
  daemon_process daemon;
  // The daemon stays stopped: the buffer's release at the end tries to reconnect only briefly.
  auto client =
      gpumem::Client::connect({.socket_path = daemon.socket_path(), .reconnect_for = 100ms});
  auto buffer = client.allocate(kSize, {.name = "mapped"});
  fill_pattern(buffer.data(), kSize, 11);
  daemon.stop(SIGTERM);
  EXPECT_EQ(first_mismatch(buffer.data(), kSize, 11), kSize);
}

TEST(Restart, SigtermUnderSystemdHandsTheStateOnLikeACrash) {
  systemd_supervisor daemon({});
  daemon.start();
  auto holder = peer(daemon, {"hold-new", "graceful", std::to_string(kSize), "9"});
  ASSERT_TRUE(ready(holder).starts_with("ready"));
  daemon.restart(SIGTERM);
  auto client = daemon.connect();
  auto kept = client.open("graceful");
  EXPECT_EQ(first_mismatch(kept.data(), kSize, 9), kSize);
}

/// The generation of the snapshot the store holds now (its fds are named state.N), 0 if none.
std::uint64_t stored_snapshot_generation(const systemd_supervisor& daemon) {
  std::uint64_t newest = 0;
  for (const std::string& name : daemon.stored_names()) {
    if (name.starts_with("state."))
      newest = std::max<std::uint64_t>(newest, std::stoull(name.substr(6)));
  }
  return newest;
}

std::ptrdiff_t stored_with_prefix(const systemd_supervisor& daemon, std::string_view prefix) {
  const auto names = daemon.stored_names();
  return std::count_if(names.begin(), names.end(),
                       [&](const std::string& name) { return name.starts_with(prefix); });
}

// The journal of changes is folded into a new snapshot once it has grown past its limit (256
// KiB beside a small state): a daemon killed after two folds still has every buffer, and the
// store holds one snapshot and one journal, of the newest generation.
TEST(Restart, BuffersMadeAcrossJournalFoldsSurviveASigkill) {
  systemd_supervisor daemon({});
  daemon.start();
  constexpr std::size_t kBytes = 4096;
  constexpr std::size_t kMostBuffers = 20000;
  auto client = daemon.connect();
  const std::uint64_t first = stored_snapshot_generation(daemon);
  std::vector<gpumem::Buffer> held;
  while (held.size() < kMostBuffers && stored_snapshot_generation(daemon) < first + 2) {
    const auto index = static_cast<std::uint32_t>(held.size());
    held.push_back(client.allocate(kBytes, {.name = "fold." + std::to_string(index)}));
    fill_pattern(held.back().data(), kBytes, index);
  }
  ASSERT_GE(stored_snapshot_generation(daemon), first + 2)
      << "no two folds in " << held.size() << " allocations";
  // The old generation's removal is not waited for (the new one was): polled.
  const auto one_of_each = [&] {
    return stored_with_prefix(daemon, "state.") == 1 && stored_with_prefix(daemon, "journal.") == 1;
  };
  EXPECT_TRUE(daemon.wait_for(one_of_each, 2s))
      << stored_with_prefix(daemon, "state.") << " snapshots and "
      << stored_with_prefix(daemon, "journal.") << " journals stored";
  daemon.restart(SIGKILL);
  auto reader = daemon.connect("reader");
  for (std::uint32_t index = 0; index < held.size(); ++index) {
    auto buffer = reader.open("fold." + std::to_string(index));
    ASSERT_EQ(first_mismatch(buffer.data(), kBytes, index), kBytes) << index;
  }
}

// A daemon killed while a fold is made on its worker leaves the snapshot being folded, that
// snapshot's journal, and the next generation's journal, which took every batch since the fold
// began. The store is put back as such a kill leaves it (copies of the first two, kept before
// the fold replaced them): every buffer is there after the restart, the ones allocated after the
// fold began and after it ended among them, and the new daemon replaces all three files with
// one snapshot and one journal.
TEST(Restart, ADaemonKilledWithAFoldUnderWayLosesNothing) {
  systemd_supervisor daemon({});
  daemon.start();
  constexpr std::size_t kBytes = 4096;
  constexpr std::size_t kMostBuffers = 20000;
  const std::uint64_t first = stored_snapshot_generation(daemon);
  const auto generation_name = [](const char* prefix, std::uint64_t generation) {
    return prefix + std::to_string(generation);
  };
  // The same memfds: the journal's copy sees each batch appended until the fold began.
  const auto copy_of = [&](const std::string& name) {
    const int stored = daemon.stored_descriptor(name);
    EXPECT_GE(stored, 0) << name;
    return unique_fd(::fcntl(stored, F_DUPFD_CLOEXEC, 3));
  };
  unique_fd snapshot = copy_of(generation_name("state.", first));
  unique_fd journal = copy_of(generation_name("journal.", first));
  auto client = daemon.connect();
  std::vector<gpumem::Buffer> held;
  const auto allocate = [&] {
    const auto index = static_cast<std::uint32_t>(held.size());
    held.push_back(client.allocate(kBytes, {.name = "underway." + std::to_string(index)}));
    fill_pattern(held.back().data(), kBytes, index);
  };
  while (held.size() < kMostBuffers && stored_snapshot_generation(daemon) == first) allocate();
  ASSERT_EQ(stored_snapshot_generation(daemon), first + 1)
      << "no fold in " << held.size() << " allocations";
  for (int more = 0; more < 16; ++more) allocate();
  ASSERT_EQ(stored_snapshot_generation(daemon), first + 1) << "a second fold came too soon";

  daemon.kill(SIGKILL);
  daemon.remove_stored(generation_name("state.", first + 1));
  daemon.add_stored(generation_name("state.", first), std::move(snapshot));
  daemon.add_stored(generation_name("journal.", first), std::move(journal));
  daemon.start();
  const auto names = daemon.stored_names();
  EXPECT_EQ(stored_with_prefix(daemon, "state."), 1) << ::testing::PrintToString(names);
  EXPECT_EQ(stored_with_prefix(daemon, "journal."), 1) << ::testing::PrintToString(names);
  EXPECT_EQ(stored_snapshot_generation(daemon), first + 2) << ::testing::PrintToString(names);
  auto reader = daemon.connect("reader");
  for (std::uint32_t index = 0; index < held.size(); ++index) {
    auto buffer = reader.open("underway." + std::to_string(index));
    ASSERT_EQ(first_mismatch(buffer.data(), kBytes, index), kBytes) << index;
  }
  // And the snapshot written at that start is read back by the next.
  daemon.restart(SIGKILL);
  auto after = daemon.connect("after");
  const auto last = static_cast<std::uint32_t>(held.size() - 1);
  EXPECT_EQ(first_mismatch(after.open("underway." + std::to_string(last)).data(), kBytes, last),
            kBytes);
}

// Killed at random instants while a client allocates as fast as it can: every buffer the
// client was told about is there after each restart, with its bytes, and nothing leaks.
TEST(Restart, TenSigkillsMidRequestLoseNothingAClientWasToldAndLeakNoDescriptor) {
  systemd_supervisor daemon({});
  daemon.start();
  const std::size_t fds_at_start = daemon.open_fd_count();
  std::mt19937 random(42);
  std::vector<std::string> told;
  std::vector<child_process> allocators;
  for (int round = 0; round < 10; ++round) {
    const std::string prefix = "r" + std::to_string(round) + ".";
    // Each allocator stops at its first failed call (no reconnecting): what it was told is
    // exactly what it printed.
    allocators.push_back(
        peer(daemon, {"allocate-until-error", prefix, "65536"}, {"GPUMEM_RECONNECT_MS=0"}));
    child_process& allocator = allocators.back();
    // Killed once it got going (a sanitizer build starts slowly), at a random instant after.
    const auto first = allocator.read_line();
    ASSERT_TRUE(first && first->starts_with("made ")) << first.value_or("(nothing)");
    told.push_back(first->substr(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 50));
    daemon.kill(SIGKILL);
    // Everything it printed before its call failed was granted.
    for (auto line = allocator.read_line(5s); line && *line != "stopped";
         line = allocator.read_line(5s)) {
      ASSERT_TRUE(line->starts_with("made ")) << *line;
      told.push_back(line->substr(5));
    }
    daemon.start();
  }
  {
    auto client = daemon.connect();
    for (const std::string& name : told) {
      auto buffer = client.open(name);
      const auto index = static_cast<std::uint32_t>(std::stoul(name.substr(name.find('.') + 1)));
      ASSERT_EQ(first_mismatch(buffer.data(), 65536, index), 65536u) << name;
    }
    EXPECT_GT(told.size(), 10u);
    allocators.clear();  // SIGKILLs them: everything they held goes
    ASSERT_TRUE(daemon.wait_for([&] { return host_bytes_in_use(client) == 0; }, 2s))
        << host_bytes_in_use(client) << " bytes still in use";
  }
  // Polled: the daemon closes this client's session, and a notification's socket, a moment later.
  EXPECT_TRUE(daemon.wait_for([&] { return daemon.open_fd_count() <= fds_at_start; }, 1s))
      << daemon.open_fd_count() << " fds open, " << fds_at_start << " at the start";
}

TEST(Restart, AClientsCallsSpanTheRestartAndItsSessionStaysItsOwn) {
  systemd_supervisor daemon({});
  daemon.start();
  auto client = daemon.connect("spanning");
  const std::uint64_t id = client.id();
  auto before = client.allocate(kSize, {.name = "before"});
  fill_pattern(before.data(), kSize, 1);
  daemon.kill(SIGKILL);
  std::thread restarter([&] {
    std::this_thread::sleep_for(300ms);
    daemon.start();
  });
  // Made while no daemon runs: it waits for the restarted one.
  auto during = client.allocate(kSize, {.name = "during"});
  restarter.join();
  EXPECT_EQ(client.id(), id);
  fill_pattern(during.data(), kSize, 2);
  auto other = daemon.connect();
  auto seen_before = other.open("before");
  EXPECT_EQ(first_mismatch(seen_before.data(), kSize, 1), kSize);
  EXPECT_EQ(first_mismatch(other.open("during").data(), kSize, 2), kSize);
  const auto holders_of_before = [&] {
    for (const auto& each : other.allocations()) {
      if (each.name == "before") return each.holders;
    }
    return 0u;
  };
  EXPECT_EQ(holders_of_before(), 2u);
  before = gpumem::Buffer();  // released through the resumed session
  EXPECT_EQ(holders_of_before(), 1u);
  // Listed as before the restart: the pid it reported, connected since before the restart.
  const auto listed = other.clients();
  const auto spanning = std::ranges::find(listed, id, &ClientInfo::id);
  ASSERT_NE(spanning, listed.end());
  EXPECT_EQ(spanning->reported_pid, static_cast<std::uint32_t>(::getpid()));
  EXPECT_GE(spanning->connected_ms, 300u) << "connected counts from the restart";
}

/// @p answer's reply, which must be a success that carries one descriptor.
template <class Reply>
Reply with_one_descriptor(const raw_answer<Reply>& answer) {
  EXPECT_EQ(answer.code, proto::errc::ok) << answer.text;
  EXPECT_EQ(answer.fds.size(), 1u) << "a reply went without its descriptor";
  return answer.reply;
}

/// SIGKILLs and restarts @p daemon, then resumes @p session and sends @p request again under
/// @p request_id, as a client whose call was in flight; the answer it gets.
template <class Reply, class Request>
raw_answer<Reply> in_flight_across_a_sigkill(systemd_supervisor& daemon,
                                             const proto::hello_reply& session,
                                             std::uint32_t request_id, proto::message_type type,
                                             const Request& request) {
  daemon.kill(SIGKILL);
  daemon.start();
  raw_client raw(daemon.socket_path());
  const auto resumed = raw.resume(session);
  EXPECT_EQ(resumed.code, proto::errc::ok) << resumed.text;
  raw.number_next_request(request_id);
  return raw.call<Reply>(type, request);
}

/// A host reservation named @p name: 4 MiB, 2 of them committed.
proto::reserve_request host_reservation_named(std::string_view name) {
  proto::reserve_request reserve{};
  reserve.max_size = 4 << 20;
  reserve.initial_size = 2 << 20;
  reserve.device = proto::kHostDevice;
  EXPECT_FALSE(proto::make_wire_name(name, reserve.name));
  return reserve;
}

// The reply kept for a call in flight is sent again with the descriptors it announces: a
// reservation's notice page, a lock page other than the client's own.
TEST(Restart, AClientResumingIntoADaemonFullOfNewClientsWaitsForAPlace) {
  const temporary_file config("gpumemd-full", "max_connections: 2\n");
  systemd_supervisor daemon({.args = {"--config", config.path()}});
  daemon.start();
  auto client = daemon.connect("resuming");
  const std::uint64_t id = client.id();
  daemon.kill(SIGKILL);
  daemon.start();
  // Two newcomers take both places before the client comes back.
  auto first = std::make_unique<raw_client>(daemon.socket_path());
  raw_client second(daemon.socket_path());
  ASSERT_EQ(first->hello().code, proto::errc::ok);
  ASSERT_EQ(second.hello().code, proto::errc::ok);
  std::thread leaver([&] {
    std::this_thread::sleep_for(500ms);
    first.reset();
  });
  const auto started = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(client.ping()) << "a full daemon failed the resuming call";
  leaver.join();
  EXPECT_GE(std::chrono::steady_clock::now() - started, 400ms) << "served with no place free";
  EXPECT_EQ(client.id(), id) << "the session was not resumed";
}

// Its sessions awaiting their resumes count as a uid's connections after a restart, and each
// connection coming back is one of them: a uid at its quota gets every session back, even with
// a connection of its own that has not said hello yet (which the hello's quota check once
// counted against the resume, ending the session it came to carry on).
TEST(Restart, AUidAtItsConnectionQuotaResumesEachOfItsSessions) {
  const temporary_file config("gpumemd-quota", "quotas:\n  default:\n    connections: 2\n");
  systemd_supervisor daemon({.args = {"--config", config.path()}});
  daemon.start();
  auto first = daemon.connect("first");
  auto second = daemon.connect("second");
  const std::uint64_t first_id = first.id();
  const std::uint64_t second_id = second.id();
  daemon.kill(SIGKILL);
  daemon.start();
  raw_client not_yet_greeted(daemon.socket_path());
  EXPECT_NO_THROW(first.ping());
  EXPECT_NO_THROW(second.ping());
  EXPECT_EQ(first.id(), first_id);
  EXPECT_EQ(second.id(), second_id);
}

TEST(Restart, AKeptReplyIsSentAgainWithItsDescriptors) {
  systemd_supervisor daemon({});
  daemon.start();
  raw_client raw(daemon.socket_path());
  const auto hello = raw.hello();
  ASSERT_EQ(hello.code, proto::errc::ok) << hello.text;

  const proto::reserve_request reserve = host_reservation_named("kept.reservation");
  const auto reserved = with_one_descriptor(
      raw.call<proto::reservation_reply>(proto::message_type::reserve, reserve));
  EXPECT_EQ(with_one_descriptor(in_flight_across_a_sigkill<proto::reservation_reply>(
                                    daemon, hello.reply, raw.last_request_id(),
                                    proto::message_type::reserve, reserve))
                .reservation_id,
            reserved.reservation_id);

  raw_client again(daemon.socket_path());
  ASSERT_EQ(again.resume(hello.reply).code, proto::errc::ok);
  ASSERT_EQ(
      again.call<proto::sync_attach_reply>(proto::message_type::attach_sync, proto::empty_payload{})
          .code,
      proto::errc::ok);
  proto::sync_open_request lock{};
  ASSERT_FALSE(proto::make_wire_name("kept.lock", lock.name));
  lock.kind = proto::sync_kind::lock;
  lock.flags = proto::mode_flags(0660) | proto::kFlagSendPage;
  const auto opened =
      with_one_descriptor(again.call<proto::sync_open_reply>(proto::message_type::open_sync, lock));
  EXPECT_EQ(with_one_descriptor(in_flight_across_a_sigkill<proto::sync_open_reply>(
                                    daemon, hello.reply, again.last_request_id(),
                                    proto::message_type::open_sync, lock))
                .cell,
            opened.cell);
}

// A version begun or committed whose reply the dead daemon never sent: sent again, the call
// gets the reply it had, not a second execution's refusal ("version 2 is being written
// already", "this client writes no version 2"), which left the draft with no one to abandon it.
TEST(Restart, AVersionBegunOrCommittedJustBeforeASigkillIsAnsweredOnce) {
  systemd_supervisor daemon({});
  daemon.start();
  raw_client raw(daemon.socket_path());
  const auto hello = raw.hello();
  ASSERT_EQ(hello.code, proto::errc::ok) << hello.text;
  const auto reserved = with_one_descriptor(raw.call<proto::reservation_reply>(
      proto::message_type::reserve, host_reservation_named("kept.versions")));

  const proto::begin_version_request begin{reserved.reservation_id, 4 << 20};
  const auto begun = raw.call<proto::reservation_reply>(proto::message_type::begin_version, begin);
  ASSERT_EQ(begun.code, proto::errc::ok) << begun.text;
  const auto begun_again = in_flight_across_a_sigkill<proto::reservation_reply>(
      daemon, hello.reply, raw.last_request_id(), proto::message_type::begin_version, begin);
  ASSERT_EQ(begun_again.code, proto::errc::ok) << begun_again.text;
  EXPECT_EQ(begun_again.reply.version, begun.reply.version);

  raw_client resumed(daemon.socket_path());
  ASSERT_EQ(resumed.resume(hello.reply).code, proto::errc::ok);
  resumed.number_next_request(raw.last_request_id() + 1);
  const proto::version_request commit{reserved.reservation_id, begun.reply.version};
  const auto committed =
      resumed.call<proto::reservation_reply>(proto::message_type::commit_version, commit);
  ASSERT_EQ(committed.code, proto::errc::ok) << committed.text;
  const auto committed_again = in_flight_across_a_sigkill<proto::reservation_reply>(
      daemon, hello.reply, resumed.last_request_id(), proto::message_type::commit_version, commit);
  ASSERT_EQ(committed_again.code, proto::errc::ok) << committed_again.text;
  EXPECT_EQ(committed_again.reply.version, committed.reply.version);
}

// A restarted daemon does not know which pages a client has mapped: it sends them again with
// the next open there, and the client closes the copy.
TEST(Restart, APageSentAgainAfterTheRestartIsNotKeptTwice) {
  systemd_supervisor daemon({});
  daemon.start();
  auto client = daemon.connect("pages");
  auto first = client.lock("group.first", {.mode = 0660});
  daemon.kill(SIGKILL);
  daemon.start();
  client.ping();  // resumed
  const std::size_t fds_before = open_fds_of_this_process();
  std::vector<gpumem::Lock> more;
  for (int i = 0; i < 20; ++i) {
    more.push_back(client.lock("group." + std::to_string(i), {.mode = 0660}));
    more.back().lock();
    more.back().unlock();
  }
  EXPECT_EQ(open_fds_of_this_process(), fds_before) << "copies of a mapped page were kept";
  first.lock();  // the mapping made before the restart still works
  first.unlock();
}

// A client allocating without pause while gpumemd is SIGKILLed and restarted ten times: every
// call completes once, whether the dead daemon had done it (the stored reply is sent again) or
// not (it is done now): a second execution would fail with already_exists and stop the client.
TEST(Restart, CallsInFlightAcrossTenSigkillsCompleteExactlyOnce) {
  systemd_supervisor daemon({});
  daemon.start();
  auto allocator = peer(daemon, {"allocate-until-error", "n.", "4096"});
  std::mt19937 random(7);
  std::vector<std::string> told;
  const auto take_line = [&] {
    const auto line = allocator.read_line();
    ASSERT_TRUE(line && line->starts_with("made ")) << line.value_or("(nothing)");
    told.push_back(line->substr(5));
  };
  for (int round = 0; round < 10; ++round) {
    take_line();  // the client got going again since the last restart
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 50));
    daemon.kill(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 50));
    daemon.start();
  }
  take_line();
  allocator.signal(SIGSTOP);
  for (auto line = allocator.read_line(200ms); line; line = allocator.read_line(200ms)) {
    ASSERT_NE(*line, "stopped") << "a call failed across a restart";
    told.push_back(line->substr(5));
  }
  ASSERT_GT(told.size(), 10u);
  auto client = daemon.connect();
  for (const std::string& name : told) {
    auto buffer = client.open(name);
    ASSERT_EQ(first_mismatch(buffer.data(), 4096, std::stoul(name.substr(2))), 4096u) << name;
  }
  allocator.signal(SIGKILL);
}

/// Starts @p daemon, a peer holding a buffer named @p name, and SIGKILLs the daemon.
child_process hold_then_kill(systemd_supervisor& daemon, const std::string& name, int seed) {
  daemon.start();
  auto holder = peer(daemon, {"hold-new", name, std::to_string(kSize), std::to_string(seed)});
  EXPECT_TRUE(ready(holder).starts_with("ready"));
  daemon.kill(SIGKILL);
  return holder;
}

std::string stored_journal(const systemd_supervisor& daemon) {
  for (const std::string& name : daemon.stored_names()) {
    if (name.starts_with("journal.")) return name;
  }
  return {};
}

/// Where the whole batches of the stored journal @p name end: the journal's file is as large as
/// its room, and a crash while a batch was appended leaves that batch's first bytes here.
std::size_t end_of_batches(int journal, const std::string& name) {
  std::vector<std::byte> bytes(static_cast<std::size_t>(::lseek(journal, 0, SEEK_END)));
  EXPECT_EQ(::pread(journal, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  daemon::restart::record_map records;
  const auto generation = std::stoull(name.substr(name.find('.') + 1));
  return daemon::restart::replay(bytes, daemon::restart::file_kind::journal, generation, records)
      .end;
}

// A crash while a batch was appended leaves its first bytes after the last whole one: ignored
// whole.
TEST(Restart, AJournalEndingInATornBatchGivesTheStateBeforeIt) {
  systemd_supervisor daemon({});
  auto holder = hold_then_kill(daemon, "before.tear", 4);
  const std::string name = stored_journal(daemon);
  const int journal = daemon.stored_descriptor(name);
  ASSERT_GE(journal, 0);
  const std::string torn = "GATB\x40\0\0\0 a batch that was never finished";
  const auto end = static_cast<off_t>(end_of_batches(journal, name));
  ASSERT_EQ(::pwrite(journal, torn.data(), torn.size(), end), static_cast<ssize_t>(torn.size()));
  daemon.start();
  auto client = daemon.connect();
  EXPECT_EQ(first_mismatch(client.open("before.tear").data(), kSize, 4), kSize);
  EXPECT_NE(daemon.log_tail().find("cut short"), std::string::npos) << daemon.log_tail();
}

// A journal read back that cannot be written again (sealed against writes here; a system out
// of memory refuses it alike) loses nothing either: the state goes on in a new snapshot of the
// next generation, which a later restart reads back.
TEST(Restart, AJournalThatCannotBeAppendedToAtTheRestartGoesOnInANewSnapshot) {
  systemd_supervisor daemon({});
  auto holder = hold_then_kill(daemon, "before.seal", 7);
  const std::uint64_t before = stored_snapshot_generation(daemon);
  const int journal = daemon.stored_descriptor(stored_journal(daemon));
  ASSERT_GE(journal, 0);
  ASSERT_EQ(::fcntl(journal, F_ADD_SEALS, F_SEAL_WRITE), 0) << std::strerror(errno);
  daemon.start();
  EXPECT_NE(daemon.log_tail().find("cannot be appended to"), std::string::npos)
      << daemon.log_tail();
  EXPECT_GT(stored_snapshot_generation(daemon), before);
  auto client = daemon.connect();
  EXPECT_EQ(first_mismatch(client.open("before.seal").data(), kSize, 7), kSize);
  auto made_after = client.allocate(4096, {.name = "after.seal"});
  daemon.restart(SIGKILL);
  auto after = daemon.connect();
  EXPECT_EQ(first_mismatch(after.open("before.seal").data(), kSize, 7), kSize);
  EXPECT_TRUE(opens(after, "after.seal"));
}

/// Overwrites the start of the stored journal, so that the next start cannot read the state.
void make_state_unreadable(systemd_supervisor& daemon) {
  const int journal = daemon.stored_descriptor(stored_journal(daemon));
  ASSERT_GE(journal, 0);
  const std::string garbage(64, 'x');
  ASSERT_EQ(::pwrite(journal, garbage.data(), garbage.size(), 0),
            static_cast<ssize_t>(garbage.size()));
}

// A state that cannot be read is a clean start with a clear line in the log, every time: never
// a daemon that fails to start (and is restarted, and fails again).
TEST(Restart, AnUnreadableStateMeansACleanStartNotACrashLoop) {
  systemd_supervisor daemon({});
  auto holder = hold_then_kill(daemon, "lost.state", 6);
  ASSERT_NO_FATAL_FAILURE(make_state_unreadable(daemon));
  daemon.start();
  EXPECT_NE(daemon.log_tail().find("unreadable"), std::string::npos) << daemon.log_tail();
  auto client = daemon.connect();
  EXPECT_FALSE(opens(client, "lost.state"));
  EXPECT_TRUE(client.stats().state_kept);
  auto kept = client.allocate(4096, {.name = "after.clean.start"});
  daemon.restart(SIGKILL);
  auto after = daemon.connect();
  EXPECT_TRUE(opens(after, "after.clean.start"));
}

// A store that an earlier gpumemd filled (here with descriptors nothing refers to, and a state
// that cannot be read): the new gpumemd lets go of what it does not adopt before it stores its
// own state, which systemd would otherwise drop, and the restart after it would start clean.
TEST(Restart, AStoreFullOfAnEarlierDaemonsLeftoversLeavesRoomForTheNewState) {
  constexpr std::size_t kStoreMax = 32;
  systemd_supervisor daemon({.fd_store_max = kStoreMax});
  auto holder = hold_then_kill(daemon, "lost.state", 6);
  ASSERT_NO_FATAL_FAILURE(make_state_unreadable(daemon));
  for (int junk = 0; daemon.stored_count() < kStoreMax; ++junk) {
    unique_fd memfd(::memfd_create("leftover", MFD_CLOEXEC));
    ASSERT_TRUE(memfd);
    daemon.add_stored("leftover." + std::to_string(junk), std::move(memfd));
  }
  daemon.start();
  auto client = daemon.connect();
  auto kept = client.allocate(4096, {.name = "after.full.store"});
  daemon.restart(SIGKILL);
  auto after = daemon.connect();
  EXPECT_TRUE(opens(after, "after.full.store")) << daemon.log_tail();
  for (const std::string& name : daemon.stored_names()) {
    EXPECT_FALSE(name.starts_with("leftover.")) << name;
  }
}

// A wedged loop sends no watchdog pings: systemd kills the daemon and starts it again, and that
// loses nothing either.
TEST(Restart, AWatchdogKillOfAWedgedDaemonLosesNothing) {
  systemd_supervisor daemon({.watchdog = 300ms});
  daemon.start();
  auto holder = peer(daemon, {"hold-new", "watched", std::to_string(kSize), "12"});
  ASSERT_TRUE(ready(holder).starts_with("ready"));
  ASSERT_TRUE(daemon.wait_for([&] { return daemon.watchdog_pings() >= 2; }, 2s));
  ::kill(daemon.pid(), SIGSTOP);  // wedged: its loop runs no more
  ASSERT_TRUE(daemon.wait_for([&] { return !daemon.running(); }, 2s));
  EXPECT_EQ(daemon.watchdog_kills(), 1u);
  daemon.start();
  auto client = daemon.connect();
  EXPECT_EQ(first_mismatch(client.open("watched").data(), kSize, 12), kSize);
}

}  // namespace
}  // namespace gpumem::testing
