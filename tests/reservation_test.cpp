// Host reservations against a real gpumemd: bytes across processes, versions seen in order and
// never torn, a writer that dies mid-version, read-only mappings, sleep and wake, holders that
// keep their mapping, owners that die asleep. Other processes are gpumem_test_reservation_peer.
#include "gpumem/reservation.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "gpumem/gpumem.h"
#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/pattern.hpp"
#include "support/raw_client.hpp"
#include "support/temporary_file.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kChunk = 2u << 20;  // the host backend's chunk

child_process peer(const daemon_process& daemon, const std::vector<std::string>& args) {
  std::vector<std::string> argv{GPUMEM_TEST_RESERVATION_PEER};
  argv.insert(argv.end(), args.begin(), args.end());
  return child_process(argv, {daemon.socket_env()});
}

std::string next_line(child_process& process, std::chrono::milliseconds within = 10s) {
  return process.read_line(within).value_or("(no line)");
}

/// What the daemon lists of reservation @p id, asked on a connection of its own.
std::optional<proto::reservation_record> record_of(const daemon_process& daemon, std::uint64_t id) {
  raw_client raw(daemon.socket_path());
  if (raw.hello().code != proto::errc::ok) return std::nullopt;
  for (std::uint64_t after = 0;;) {
    const auto page = raw.call<proto::reservation_list_reply>(
        proto::message_type::list_reservations, proto::list_request{after});
    for (const auto& record : page.reply.records) {
      if (record.reservation_id == id) return record;
    }
    if (page.reply.head.more == 0 || page.reply.records.empty()) return std::nullopt;
    after = page.reply.records.back().reservation_id;
  }
}

/// Whether this process may store at @p address: the kernel refuses read() into memory it
/// cannot write with EFAULT, which keeps the check free of signals.
bool writable(void* address) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  EXPECT_EQ(::write(pipe_fds[1], "x", 1), 1);
  const char before = *static_cast<const volatile char*>(address);
  const bool stored = ::read(pipe_fds[0], address, 1) == 1;
  if (stored) *static_cast<volatile char*>(address) = before;
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  return stored;
}

bool all_zero(const void* data, std::size_t size) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  return std::all_of(bytes, bytes + size, [](std::uint8_t byte) { return byte == 0; });
}

/// Writes version @p version of @p owner (seed = version) in a draft of @p size and commits it.
void commit_version(Reservation& owner, std::size_t size) {
  auto draft = owner.begin_version(size);
  ASSERT_EQ(draft.size(), size);
  fill_pattern(draft.data(), size, static_cast<std::uint32_t>(draft.version()));
  draft.commit();
}

TEST(HostReservation, OwnerAndOpenersSeeTheSameBytesAsItGrowsAndShrinks) {
  daemon_process daemon;
  auto owner_client = daemon.connect();
  auto owner = Reservation::create(owner_client, 8 * kChunk,
                                   {.device = kHost, .name = "grows", .initial = kChunk});
  EXPECT_EQ(owner.device(), kHost);
  EXPECT_EQ(owner.chunk_size(), kChunk);
  EXPECT_EQ(owner.max_size(), 8 * kChunk);
  EXPECT_EQ(owner.size(), kChunk);
  EXPECT_EQ(owner.version(), 1u);
  EXPECT_EQ(owner.state(), ReservationState::awake);
  EXPECT_TRUE(writable(owner.data())) << "the owner writes version 1 in place";
  fill_pattern(owner.data(), kChunk, 11);

  auto holder_client = daemon.connect();
  auto holder = Reservation::open(holder_client, "grows", {.access = Access::read_only});
  EXPECT_EQ(holder.size(), kChunk);
  EXPECT_EQ(first_mismatch(holder.data(), kChunk, 11), kChunk);
  void* const holder_start = holder.data();
  EXPECT_EQ(holder.refresh(), kChunk) << "nothing changed";

  owner.resize(3 * kChunk);
  EXPECT_EQ(owner.size(), 3 * kChunk);
  fill_pattern(owner.data(), 3 * kChunk, 12);
  EXPECT_EQ(holder.refresh(), 3 * kChunk);
  EXPECT_EQ(holder.data(), holder_start);
  EXPECT_EQ(first_mismatch(holder.data(), 3 * kChunk, 12), 3 * kChunk);
  auto verifier = peer(daemon, {"verify", "grows", std::to_string(3 * kChunk), "12"});
  EXPECT_EQ(next_line(verifier), "ok");

  owner.resize(kChunk);
  EXPECT_EQ(holder.refresh(), kChunk);
  EXPECT_EQ(first_mismatch(holder.data(), kChunk, 12), kChunk) << "the first chunk stays";
  EXPECT_THROW(holder.resize(2 * kChunk), Error) << "only the owner resizes";
}

TEST(HostReservation, TheClientListCountsAReservationAsItsOwnersAndOpenersAllocationsDo) {
  daemon_process daemon;
  auto owner_client = daemon.connect("owner");
  auto owner = Reservation::create(owner_client, 8 * kChunk,
                                   {.device = kHost, .name = "counted", .initial = kChunk});
  owner.resize(3 * kChunk);
  auto opener_client = daemon.connect("opener");
  auto opened = Reservation::open(opener_client, "counted", {.access = Access::read_only});
  const auto listed = owner_client.clients();
  const auto labelled = [&](std::string_view label) {
    const auto found = std::ranges::find(listed, label, &ClientInfo::label);
    return found == listed.end() ? ClientInfo{} : *found;
  };
  const ClientInfo listed_owner = labelled("owner");
  EXPECT_EQ(listed_owner.allocations_owned, 1u);
  EXPECT_EQ(listed_owner.allocations_opened, 0u);
  EXPECT_EQ(listed_owner.bytes_owned, 3 * kChunk) << "the committed bytes";
  const ClientInfo listed_opener = labelled("opener");
  EXPECT_EQ(listed_opener.allocations_owned, 0u);
  EXPECT_EQ(listed_opener.allocations_opened, 1u);
  EXPECT_EQ(listed_opener.bytes_owned, 0u);
}

TEST(HostReservation, EveryHolderSeesEachVersionInOrderAtTheSameAddressNeverTorn) {
  daemon_process daemon;
  auto client = daemon.connect();
  // Versions differ in size: 2, 3 and 1 chunks.
  const std::size_t sizes[] = {0, 2 * kChunk, 3 * kChunk, kChunk};
  auto owner = Reservation::create(client, 4 * kChunk,
                                   {.device = kHost, .name = "weights", .initial = sizes[1]});
  fill_pattern(owner.data(), sizes[1], 1);
  void* const owner_start = owner.data();

  std::vector<child_process> readers;
  for (int i = 0; i < 3; ++i) readers.push_back(peer(daemon, {"read-versions", "weights", "3"}));
  for (std::uint64_t version = 1; version <= 3; ++version) {
    if (version > 1) commit_version(owner, sizes[version]);
    EXPECT_EQ(owner.version(), version);
    EXPECT_EQ(owner.data(), owner_start);
    EXPECT_EQ(owner.size(), sizes[version]);
    EXPECT_EQ(first_mismatch(owner.data(), sizes[version], static_cast<std::uint32_t>(version)),
              sizes[version]);
    for (auto& reader : readers) {
      EXPECT_EQ(next_line(reader),
                "saw " + std::to_string(version) + " " + std::to_string(sizes[version]));
    }
  }
  for (auto& reader : readers) {
    EXPECT_EQ(next_line(reader), "done");
    const auto status = reader.wait();
    ASSERT_TRUE(status);
    EXPECT_EQ(exit_code(*status), 0);
  }
  EXPECT_FALSE(writable(owner.data())) << "a committed version is read-only, for its owner too";
  try {
    owner.resize(4 * kChunk);
    ADD_FAILURE() << "a reservation with a later version resized";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::wrong_state) << error.what();
  }
  EXPECT_TRUE(eventually([&] {
    const auto record = record_of(daemon, owner.id());
    return record && record->version == 3 && record->retained_bytes == 0;
  })) << "versions 1 and 2 are freed once no holder maps them";
}

TEST(HostReservation, AWriterKilledMidVersionLeavesTheCurrentVersionAndFreesItsDraft) {
  daemon_process daemon;
  const std::size_t size = 2 * kChunk;
  auto writer = peer(daemon, {"own-drafting", "mid", std::to_string(size)});
  ASSERT_EQ(next_line(writer), "drafting");
  auto client = daemon.connect();
  auto holder = Reservation::open(client, "mid", {.access = Access::read_only});
  const auto drafting = record_of(daemon, holder.id());
  ASSERT_TRUE(drafting);
  EXPECT_EQ(drafting->draft_version, 2u);
  EXPECT_EQ(drafting->retained_bytes, size);

  writer.signal(SIGKILL);
  ASSERT_TRUE(writer.wait());
  EXPECT_TRUE(eventually([&] {
    const auto record = record_of(daemon, holder.id());
    return record && record->draft_version == 0 && record->retained_bytes == 0;
  })) << "the dead writer's draft is freed";
  EXPECT_EQ(holder.refresh(), size);
  EXPECT_EQ(holder.version(), 1u);
  EXPECT_EQ(first_mismatch(holder.data(), size, 1), size);
  auto verifier = peer(daemon, {"verify", "mid", std::to_string(size), "1"});
  EXPECT_EQ(next_line(verifier), "ok");
}

TEST(HostReservation, AnAbandonedDraftLeavesTheCurrentVersion) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto owner =
      Reservation::create(client, 2 * kChunk, {.device = kHost, .name = "kept", .initial = kChunk});
  fill_pattern(owner.data(), kChunk, 1);
  {
    auto draft = owner.begin_version(2 * kChunk);
    EXPECT_EQ(draft.version(), 2u);
    EXPECT_NE(draft.data(), owner.data()) << "a draft has a range of its own";
    fill_pattern(draft.data(), 2 * kChunk, 2);
    try {
      owner.begin_version(kChunk);
      ADD_FAILURE() << "a second draft began";
    } catch (const Error& error) {
      EXPECT_EQ(error.status(), errc::wrong_state) << error.what();
    }
  }  // abandoned
  EXPECT_EQ(owner.refresh(), kChunk);
  EXPECT_EQ(owner.version(), 1u);
  EXPECT_EQ(first_mismatch(owner.data(), kChunk, 1), kChunk);
  EXPECT_TRUE(eventually([&] {
    const auto record = record_of(daemon, owner.id());
    return record && record->draft_version == 0 && record->retained_bytes == 0;
  }));
  commit_version(owner, kChunk);  // the next draft is free to go
  EXPECT_EQ(owner.version(), 2u);
}

TEST(HostReservation, ACommitRefusedWhileTheDraftIsWritableElsewhereChangesNothing) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto owner =
      Reservation::create(client, kChunk, {.device = kHost, .name = "sealed", .initial = kChunk});
  fill_pattern(owner.data(), kChunk, 1);
  auto draft = owner.begin_version(kChunk);
  fill_pattern(draft.data(), kChunk, 2);
  // A forked child inherits the draft's writable mapping, which the daemon cannot seal.
  const pid_t child = ::fork();
  if (child == 0) {
    for (;;) ::pause();
  }
  try {
    draft.commit();
    ADD_FAILURE() << "a draft mapped writable elsewhere was committed";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::busy) << error.what();
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(first_mismatch(draft.data(), kChunk, 2), kChunk) << "the draft is mapped again";
  EXPECT_EQ(owner.refresh(), kChunk);
  EXPECT_EQ(owner.version(), 1u);
  draft.commit();
  EXPECT_EQ(owner.version(), 2u);
  EXPECT_EQ(first_mismatch(owner.data(), kChunk, 2), kChunk);
}

TEST(HostReservation, ReadersAndCommittedVersionsAreMappedReadOnly) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto owner =
      Reservation::create(client, kChunk, {.device = kHost, .name = "ro", .initial = kChunk});
  const auto killed_by = [&](const char* access) {
    auto writer = peer(daemon, {"write", "ro", access});
    EXPECT_EQ(next_line(writer), "writing");
    const auto status = writer.wait();
    return status ? exit_code(*status) : -1;
  };
  // The peer's `write` exits with 3 when its write faults (its own SIGSEGV handler).
  constexpr int kFaulted = 3;
  EXPECT_EQ(killed_by("ro"), kFaulted) << "a read-only holder of version 1";
  EXPECT_EQ(killed_by("rw"), 0) << "a read-write holder writes version 1";
  commit_version(owner, kChunk);
  EXPECT_EQ(killed_by("rw"), kFaulted) << "a read-write holder of version 2";
}

TEST(HostReservation, AReadOnlyHandleInTheOwnersProcessChangesNothing) {
  // The daemon knows the owner by its client; the handle's read-only access is the library's
  // to keep.
  daemon_process daemon;
  auto client = daemon.connect();
  auto owner =
      Reservation::create(client, kChunk, {.device = kHost, .name = "own.ro", .initial = kChunk});
  auto reader = Reservation::open(client, "own.ro", {.access = Access::read_only});
  const auto refusal = [](auto&& change) {
    try {
      change();
    } catch (const Error& error) {
      return std::pair(error.status(), std::string(error.what()));
    }
    return std::pair(errc::ok, std::string());
  };
  const auto [resized, resize_words] = refusal([&] { reader.resize(2 * kChunk); });
  EXPECT_EQ(resized, errc::permission_denied);
  EXPECT_NE(resize_words.find("opened read-only here"), std::string::npos) << resize_words;
  const auto [drafted, draft_words] = refusal([&] { reader.begin_version(kChunk); });
  EXPECT_EQ(drafted, errc::permission_denied) << draft_words;
  EXPECT_EQ(owner.refresh(), kChunk) << "the refused resize changed the reservation";
  commit_version(owner, kChunk);  // the owner's own handle may
}

// Earlier versions that readers still map, and a draft, are memory the owner keeps: they count
// against the owner's quota as the current version does (the tenant audit of 2026-11-29 kept
// 840 MiB under a 64 MiB quota through readers that never refresh), so a reader that never
// refreshes holds back the owner's next version or allocation, and the room comes back as such
// readers let go.
TEST(HostReservation, VersionsReadersStillMapCountAgainstTheOwnersQuota) {
  const temporary_file config(
      "gpumemd-retained",
      "quotas:\n  default:\n    bytes: " + std::to_string(4 * kChunk / (1 << 20)) + "MiB\n");
  daemon_process daemon({"--config", config.path()});
  auto client = daemon.connect();
  auto owner =
      Reservation::create(client, kChunk, {.device = kHost, .name = "kept", .initial = kChunk});
  fill_pattern(owner.data(), kChunk, 1);
  const auto owned = [&] { return client.clients().at(0).bytes_owned; };
  {
    auto draft = owner.begin_version(kChunk);
    EXPECT_EQ(owned(), 2 * kChunk) << "an open draft is not charged";
  }
  // Each reader maps the version current when it opens, and never refreshes.
  std::vector<child_process> readers;
  for (std::uint32_t version = 1; version <= 3; ++version) {
    readers.push_back(peer(daemon, {"hold", "kept", std::to_string(version)}));
    ASSERT_EQ(next_line(readers.back()).rfind("ready", 0), 0u);
    commit_version(owner, kChunk);
  }
  EXPECT_EQ(owned(), 4 * kChunk) << "versions 1 to 3 and the current one 4";
  const auto refused = [](auto&& work) {
    try {
      work();
    } catch (const Error& error) {
      EXPECT_EQ(error.status(), errc::quota_exceeded) << error.what();
      return std::string(error.what());
    }
    return std::string("(not refused)");
  };
  EXPECT_NE(refused([&] {
              owner.begin_version(kChunk);
            }).find("6291456 bytes in use are earlier versions readers still map; quota"),
            std::string::npos);
  EXPECT_NE(refused([&] { client.allocate(4096); }).find("quota"), std::string::npos);
  readers.front().signal(SIGKILL);
  ASSERT_TRUE(readers.front().wait());
  EXPECT_TRUE(eventually([&] { return owned() == 3 * kChunk; }))
      << "version 1's reader left, and its chunk did not come back";
  commit_version(owner, kChunk);
}

TEST(HostReservation, SleepMovesTheBytesToTheHostAndWakeBringsThemBackForEveryHolder) {
  daemon_process daemon;
  auto client = daemon.connect();
  const std::size_t size = 3 * kChunk;
  auto owner = Reservation::create(client, size, {.device = kHost, .name = "nap", .initial = size});
  fill_pattern(owner.data(), size, 21);
  void* const start = owner.data();
  auto holder_client = daemon.connect();
  auto holder = Reservation::open(holder_client, "nap", {.access = Access::read_only});

  // The holder lets go at its next refresh while the daemon waits for it.
  std::thread letting_go([&] {
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (holder.refresh() != 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(5ms);
    }
  });
  owner.sleep();
  letting_go.join();
  EXPECT_EQ(owner.state(), ReservationState::asleep);
  EXPECT_EQ(owner.size(), 0u);
  EXPECT_EQ(holder.size(), 0u);
  const auto asleep = owner.status();
  EXPECT_EQ(asleep.state, ReservationState::asleep);
  EXPECT_FALSE(asleep.busy);
  EXPECT_EQ(asleep.committed, size);
  EXPECT_GE(asleep.host_bytes, size);
  EXPECT_EQ(reservation_status(client, "nap").state, ReservationState::asleep);

  owner.wake();
  EXPECT_EQ(owner.state(), ReservationState::awake);
  EXPECT_EQ(owner.data(), start);
  EXPECT_EQ(owner.size(), size);
  EXPECT_EQ(first_mismatch(owner.data(), size, 21), size);
  EXPECT_EQ(owner.status().host_bytes, 0u) << "the host copy is returned after wake";
  EXPECT_EQ(holder.refresh(), size);
  EXPECT_EQ(first_mismatch(holder.data(), size, 21), size);
  auto verifier = peer(daemon, {"verify", "nap", std::to_string(size), "21"});
  EXPECT_EQ(next_line(verifier), "ok");
}

TEST(HostReservation, AnOperatorPutsItToSleepAndWakesItByName) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto owner =
      Reservation::create(client, kChunk, {.device = kHost, .name = "byname", .initial = kChunk});
  fill_pattern(owner.data(), kChunk, 31);
  owner.quiesce();
  EXPECT_EQ(owner.size(), 0u);
  auto operator_client = daemon.connect();
  sleep_reservation(operator_client, "byname");
  EXPECT_EQ(reservation_status(operator_client, "byname").state, ReservationState::asleep);
  EXPECT_EQ(owner.refresh(), 0u);
  EXPECT_EQ(owner.state(), ReservationState::asleep);
  wake_reservation(operator_client, "byname");
  EXPECT_EQ(owner.refresh(), kChunk);
  EXPECT_EQ(first_mismatch(owner.data(), kChunk, 31), kChunk);
}

TEST(HostReservation, AHolderThatNeverLetsGoFailsTheSleepByNameAndKeepsItsBytes) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto owner =
      Reservation::create(client, kChunk, {.device = kHost, .name = "held", .initial = kChunk});
  fill_pattern(owner.data(), kChunk, 41);
  auto holder = peer(daemon, {"hold", "held", "41"});
  const std::string ready = next_line(holder);
  ASSERT_TRUE(ready.starts_with("ready ")) << ready;
  const std::string holder_client = ready.substr(6);

  try {
    owner.sleep({.deadline = 300ms});
    ADD_FAILURE() << "a sleep went through a holder that kept its mapping";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::busy) << error.what();
    const std::string what = error.what();
    EXPECT_TRUE(what.find(holder_client) != std::string::npos ||
                what.find(std::to_string(holder.pid())) != std::string::npos)
        << "names neither client " << holder_client << " nor pid " << holder.pid() << ": " << what;
  }
  EXPECT_EQ(owner.state(), ReservationState::awake);
  EXPECT_EQ(owner.size(), kChunk) << "the owner maps it again";
  EXPECT_EQ(first_mismatch(owner.data(), kChunk, 41), kChunk);
  const auto status = owner.status();
  EXPECT_EQ(status.state, ReservationState::awake);
  EXPECT_EQ(status.error, errc::busy);
  holder.signal(SIGUSR1);
  EXPECT_EQ(next_line(holder), "ok") << "the holder's mapping and bytes are intact";
}

TEST(HostReservation, ASleepOrWakeOutOfTurnIsRefusedNamingTheReservationAndWhereItStands) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto owner =
      Reservation::create(client, kChunk, {.device = kHost, .name = "turns", .initial = kChunk});
  const std::string named = "reservation 'turns' (id " + std::to_string(owner.id()) + ")";
  auto operator_client = daemon.connect();
  try {
    wake_reservation(operator_client, "turns");
    ADD_FAILURE() << "an awake reservation was woken";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::wrong_state);
    EXPECT_NE(std::string(error.what()).find(named + " cannot wake: it is awake"),
              std::string::npos)
        << error.what();
  }
  fill_pattern(owner.data(), kChunk, 43);
  auto holder = peer(daemon, {"hold", "turns", "43"});
  ASSERT_TRUE(next_line(holder).starts_with("ready ")) << "the holder did not map it";
  // A deadline the checks below cannot outlast, however slow the machine: the holder's death
  // ends the sleep.
  std::thread sleeping([&] { EXPECT_NO_THROW(owner.sleep({.deadline = 60s})); });
  EXPECT_TRUE(eventually([&] {
    return reservation_status(operator_client, "turns").state == ReservationState::draining;
  }));
  try {
    sleep_reservation(operator_client, "turns");
    ADD_FAILURE() << "a second sleep began during the first";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::wrong_state);
    EXPECT_NE(
        std::string(error.what())
            .find(named + " cannot go to sleep: a sleep is under way (its holders letting go)"),
        std::string::npos)
        << error.what();
  }
  holder.signal(SIGKILL);
  sleeping.join();
  EXPECT_EQ(owner.state(), ReservationState::asleep);
}

TEST(HostReservation, ASleepingReservationWhoseOwnerDiesIsFreedWithItsHostCopy) {
  daemon_process daemon;
  auto client = daemon.connect();
  {  // whatever the daemon makes on first use is there before it is counted
    auto warm = Reservation::create(client, kChunk, {.device = kHost, .initial = kChunk});
    warm.sleep();
    warm.wake();
    // The worker lets the woken copy go after the wake; a sleep's job queues behind that, so
    // once this one is asleep the copy's fd is closed.
    warm.sleep({.discard = true});
  }
  const std::size_t daemon_fds = daemon.open_fd_count();
  {
    const std::size_t size = 4 * kChunk;
    auto owner = peer(daemon, {"own-asleep", "orphan", std::to_string(size), "51"});
    ASSERT_EQ(next_line(owner), "asleep");
    auto holder = Reservation::open(client, "orphan", {.access = Access::read_only});
    EXPECT_EQ(holder.size(), 0u);
    EXPECT_GE(reservation_status(client, "orphan").host_bytes, size);

    owner.signal(SIGKILL);
    ASSERT_TRUE(owner.wait());
    EXPECT_TRUE(eventually([&] {
      try {
        holder.refresh();
        return false;
      } catch (const Error& error) {
        EXPECT_EQ(error.status(), errc::not_found) << error.what();
        return true;
      }
    })) << "the holder learns that it is lost";
    EXPECT_EQ(holder.state(), ReservationState::lost);
  }
  EXPECT_TRUE(eventually([&] { return daemon.open_fd_count() == daemon_fds; }))
      << "the host copy, the notice page and the owner's session are closed: "
      << daemon.open_fd_count() << " fds, " << daemon_fds << " before";
  EXPECT_TRUE(client.reservations().empty());
}

TEST(HostReservation, ASleepThatDiscardsWakesZeroed) {
  daemon_process daemon;
  auto client = daemon.connect();
  const std::size_t size = 2 * kChunk;
  auto owner =
      Reservation::create(client, size, {.device = kHost, .name = "cache", .initial = size});
  fill_pattern(owner.data(), size, 61);
  owner.sleep({.discard = true});
  const auto asleep = owner.status();
  EXPECT_EQ(asleep.state, ReservationState::asleep);
  EXPECT_EQ(asleep.host_bytes, 0u) << "nothing was copied";
  owner.wake();
  EXPECT_EQ(owner.size(), size);
  EXPECT_TRUE(all_zero(owner.data(), size));
}

TEST(HostReservation, WaitVersionWakesOnACommitAndTimesOutWithoutOne) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto owner =
      Reservation::create(client, kChunk, {.device = kHost, .name = "waited", .initial = kChunk});
  fill_pattern(owner.data(), kChunk, 1);
  auto reader_client = daemon.connect();
  auto reader = Reservation::open(reader_client, "waited", {.access = Access::read_only});

  auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(reader.wait_version(2, 200ms));
  EXPECT_GE(std::chrono::steady_clock::now() - started, 200ms);
  EXPECT_EQ(reader.version(), 1u);

  std::thread writer([&] {
    std::this_thread::sleep_for(200ms);
    commit_version(owner, kChunk);
  });
  started = std::chrono::steady_clock::now();
  EXPECT_TRUE(reader.wait_version(2, 10s));
  const auto waited = std::chrono::steady_clock::now() - started;
  writer.join();
  EXPECT_LT(waited, 5s) << "woken by the commit, not by the timeout";
  EXPECT_EQ(reader.version(), 2u);
  EXPECT_EQ(first_mismatch(reader.data(), kChunk, 2), kChunk);
  EXPECT_TRUE(reader.wait_version(1, 0ms)) << "a version already mapped";
}

// A draft's handle may outlive its reservation: a C program may release the reservation first.
// The draft goes with it (unmapped, its chunks left to the daemon's release), and its handle
// only refuses to commit and frees itself, where it used to reach the freed reservation.
TEST(HostReservation, ADraftWhoseReservationIsReleasedFirstGoesWithIt) {
  daemon_process daemon;
  gpumem_client* writer = nullptr;
  ASSERT_EQ(gpumem_connect(daemon.socket_path().c_str(), &writer), GPUMEM_OK);
  gpumem_reservation* owned = nullptr;
  ASSERT_EQ(gpumem_reserve(writer, 2 * kChunk, kChunk, GPUMEM_HOST, "first", &owned), GPUMEM_OK);
  gpumem_reservation_draft* draft = nullptr;
  ASSERT_EQ(gpumem_begin_version(owned, 2 * kChunk, &draft), GPUMEM_OK);
  fill_pattern(gpumem_draft_data(draft), 2 * kChunk, 2);
  EXPECT_EQ(gpumem_release_reservation(owned), GPUMEM_OK);
  EXPECT_EQ(gpumem_commit(draft), GPUMEM_WRONG_STATE);
  EXPECT_NE(std::string(gpumem_last_error())
                .find("version 2: its reservation was released before it was committed"),
            std::string::npos)
      << gpumem_last_error();
  EXPECT_EQ(gpumem_abandon(draft), GPUMEM_OK);
  gpumem_disconnect(writer);

  auto client = daemon.connect();
  auto reservation = Reservation::create(client, 2 * kChunk, {.device = kHost, .initial = kChunk});
  auto kept_draft = reservation.begin_version(kChunk);
  reservation.release();
  EXPECT_THROW(kept_draft.commit(), Error);
  EXPECT_NO_THROW(kept_draft.abandon());
  EXPECT_TRUE(eventually([&] { return client.reservations().empty(); }))
      << "a reservation or its draft outlived the release";
}

TEST(HostReservation, TheCApiReservesCommitsWaitsSleepsAndWakes) {
  daemon_process daemon;
  gpumem_client* writer = nullptr;
  gpumem_client* reader = nullptr;
  ASSERT_EQ(gpumem_connect(daemon.socket_path().c_str(), &writer), GPUMEM_OK);
  ASSERT_EQ(gpumem_connect(daemon.socket_path().c_str(), &reader), GPUMEM_OK);
  gpumem_reservation* owned = nullptr;
  ASSERT_EQ(gpumem_reserve(writer, 2 * kChunk, kChunk, GPUMEM_HOST, "c-res", &owned), GPUMEM_OK);
  EXPECT_EQ(gpumem_reservation_size(owned), kChunk);
  fill_pattern(gpumem_reservation_data(owned), kChunk, 1);
  gpumem_reservation* opened = nullptr;
  ASSERT_EQ(gpumem_open_reservation(reader, "c-res", 1, &opened), GPUMEM_OK);
  EXPECT_EQ(gpumem_reservation_id(opened), gpumem_reservation_id(owned));
  EXPECT_EQ(first_mismatch(gpumem_reservation_data(opened), kChunk, 1), kChunk);

  gpumem_reservation_draft* draft = nullptr;
  ASSERT_EQ(gpumem_begin_version(owned, 2 * kChunk, &draft), GPUMEM_OK);
  EXPECT_EQ(gpumem_draft_version(draft), 2u);
  EXPECT_EQ(gpumem_draft_size(draft), 2 * kChunk);
  fill_pattern(gpumem_draft_data(draft), 2 * kChunk, 2);
  EXPECT_EQ(gpumem_commit(draft), GPUMEM_OK);
  EXPECT_EQ(gpumem_commit(draft), GPUMEM_WRONG_STATE);
  EXPECT_EQ(gpumem_abandon(draft), GPUMEM_OK) << "a committed draft's handle is only freed";
  int reached = 0;
  EXPECT_EQ(gpumem_wait_version(opened, 2, 5000, &reached), GPUMEM_OK);
  EXPECT_EQ(reached, 1);
  EXPECT_EQ(gpumem_reservation_version(opened), 2u);
  EXPECT_EQ(first_mismatch(gpumem_reservation_data(opened), 2 * kChunk, 2), 2 * kChunk);
  EXPECT_EQ(gpumem_wait_version(opened, 3, 10, &reached), GPUMEM_OK);
  EXPECT_EQ(reached, 0);
  EXPECT_EQ(gpumem_resize_reservation(owned, kChunk), GPUMEM_WRONG_STATE);

  EXPECT_EQ(gpumem_quiesce(opened), GPUMEM_OK);
  EXPECT_EQ(gpumem_sleep(owned, 0, 1000), GPUMEM_OK) << gpumem_last_error();
  size_t mapped = 1;
  EXPECT_EQ(gpumem_refresh(opened, &mapped), GPUMEM_OK);
  EXPECT_EQ(mapped, 0u);
  EXPECT_EQ(gpumem_wake(owned, 0), GPUMEM_OK) << gpumem_last_error();
  EXPECT_EQ(gpumem_refresh(opened, &mapped), GPUMEM_OK);
  EXPECT_EQ(mapped, 2 * kChunk);
  EXPECT_EQ(first_mismatch(gpumem_reservation_data(opened), 2 * kChunk, 2), 2 * kChunk);

  EXPECT_EQ(gpumem_refresh(nullptr, &mapped), GPUMEM_INVALID_ARGUMENT);
  EXPECT_EQ(gpumem_release_reservation(opened), GPUMEM_OK);
  EXPECT_EQ(gpumem_release_reservation(owned), GPUMEM_OK);
  gpumem_disconnect(reader);
  gpumem_disconnect(writer);
  EXPECT_TRUE(daemon.connect().reservations().empty());
}

}  // namespace
}  // namespace gpumem::testing
