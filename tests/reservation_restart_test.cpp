// Versions and sleep survive a restart: a real gpumemd under the stand-in for systemd is
// SIGKILLed while host reservations have a committed version a reader has not switched to, a
// draft half written, and a sleeping copy; clients reconnect and carry on where they were.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "support/metric_value.hpp"
#include "support/pattern.hpp"
#include "support/systemd_supervisor.hpp"
#include "support/temporary_file.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kChunk = 2 << 20;

const ReservationInfo& listed(Client& client, std::vector<ReservationInfo>& storage) {
  storage = client.reservations();
  EXPECT_EQ(storage.size(), 1u);
  return storage.at(0);
}

TEST(ReservationRestart, VersionsADraftAndAReaderBehindSurviveASigkill) {
  systemd_supervisor daemon({});
  daemon.start();
  auto owner_client = daemon.connect("owner");
  auto reader_client = daemon.connect("reader");
  auto owner = Reservation::create(owner_client, 8 * kChunk,
                                   {.device = kHost, .name = "w", .initial = 2 * kChunk});
  fill_pattern(owner.data(), owner.size(), 1);
  auto reader = Reservation::open(reader_client, "w", {.access = Access::read_only});
  void* const reader_base = reader.data();
  {
    auto second = owner.begin_version(3 * kChunk);
    fill_pattern(second.data(), second.size(), 2);
    second.commit();
  }
  auto third = owner.begin_version(kChunk);
  fill_pattern(third.data(), kChunk / 2, 3);  // half written when the daemon dies

  daemon.restart(SIGKILL);
  std::vector<ReservationInfo> storage;
  const ReservationInfo& after = listed(reader_client, storage);
  EXPECT_EQ(after.version, 2u);
  EXPECT_EQ(after.draft_version, 3u);
  EXPECT_EQ(after.oldest_mapped, 1u) << "the reader still maps version 1";
  EXPECT_EQ(after.retained_bytes, 2 * kChunk + kChunk) << "version 1 and the draft";
  EXPECT_EQ(reader.version(), 1u);
  EXPECT_EQ(first_mismatch(reader.data(), 2 * kChunk, 1), 2 * kChunk);

  EXPECT_EQ(reader.refresh(), 3 * kChunk);
  EXPECT_EQ(reader.data(), reader_base);
  EXPECT_EQ(first_mismatch(reader.data(), 3 * kChunk, 2), 3 * kChunk);
  fill_pattern(third.data(), kChunk, 3);
  third.commit();
  EXPECT_TRUE(reader.wait_version(3, 5s)) << "the kept notice page still wakes the reader";
  EXPECT_EQ(reader.size(), kChunk);
  EXPECT_EQ(first_mismatch(reader.data(), kChunk, 3), kChunk);
  EXPECT_EQ(listed(owner_client, storage).retained_bytes, 0u);
}

TEST(ReservationRestart, ASleepingReservationWakesWithItsBytesAfterASigkill) {
  systemd_supervisor daemon({});
  daemon.start();
  auto client = daemon.connect("owner");
  auto weights = Reservation::create(client, 4 * kChunk,
                                     {.device = kHost, .name = "s", .initial = 4 * kChunk});
  void* const base = weights.data();
  fill_pattern(weights.data(), weights.size(), 5);
  weights.sleep();
  ASSERT_EQ(weights.status().host_bytes, 4 * kChunk);

  daemon.restart(SIGKILL);
  const ReservationStatus kept = weights.status();
  EXPECT_EQ(kept.state, ReservationState::asleep);
  EXPECT_EQ(kept.host_bytes, 4 * kChunk) << "the sleep copy was kept in the fd store";
  weights.wake();
  EXPECT_EQ(weights.data(), base);
  ASSERT_EQ(weights.size(), 4 * kChunk);
  EXPECT_EQ(first_mismatch(weights.data(), weights.size(), 5), weights.size());
  EXPECT_EQ(weights.status().host_bytes, 0u);
}

/// One word per 4 KiB page, from @p seed: enough to tell a reservation's bytes came back, at a
/// small part of a whole pattern's cost under the sanitizers (the test's own loops are
/// instrumented; the daemon's copies are not).
void stamp_pages(void* data, std::size_t bytes, std::uint64_t seed) {
  for (std::size_t at = 0; at + sizeof seed <= bytes; at += 4096) {
    const std::uint64_t word = seed * 1000003 + at;
    std::memcpy(static_cast<std::byte*>(data) + at, &word, sizeof word);
  }
}

/// The first page whose word stamp_pages() did not write, or @p bytes.
std::size_t first_unstamped_page(const void* data, std::size_t bytes, std::uint64_t seed) {
  for (std::size_t at = 0; at + sizeof seed <= bytes; at += 4096) {
    std::uint64_t word = 0;
    std::memcpy(&word, static_cast<const std::byte*>(data) + at, sizeof word);
    if (word != seed * 1000003 + at) return at;
  }
  return bytes;
}

/// One word at the start of each of @p reservation's chunks, from @p seed.
void stamp_chunks(Reservation& reservation, std::uint64_t seed) {
  for (std::size_t at = 0; at < reservation.size(); at += reservation.chunk_size()) {
    const std::uint64_t word = seed * 1000003 + at;
    std::memcpy(static_cast<std::byte*>(reservation.data()) + at, &word, sizeof word);
  }
}

/// Whether every chunk starts with the word stamp_chunks() wrote.
bool chunks_stamped(const Reservation& reservation, std::uint64_t seed) {
  for (std::size_t at = 0; at < reservation.size(); at += reservation.chunk_size()) {
    std::uint64_t word = 0;
    std::memcpy(&word, static_cast<const std::byte*>(reservation.data()) + at, sizeof word);
    if (word != seed * 1000003 + at) return false;
  }
  return true;
}

// A SIGKILL while the sleep copy is copied back: the restarted daemon has the copy and the
// reservation asleep, and the wake cut short says it did not take effect (not that it did).
// The copy was once stored again under a new name as the wake began, which the fd store
// dropped as a descriptor it held already; removing the old name then lost the bytes.
TEST(ReservationRestart, AWakeCutShortByASigkillLosesNoByte) {
  systemd_supervisor daemon({});
  daemon.start();
  auto client = daemon.connect("owner");
  auto watcher = daemon.connect("watcher");
  constexpr std::size_t kBytes = 64 * kChunk;
  auto weights =
      Reservation::create(client, kBytes, {.device = kHost, .name = "big", .initial = kBytes});
  stamp_pages(weights.data(), weights.size(), 9);
  weights.sleep();
  std::string wake_failure;
  std::thread waking([&] {
    try {
      weights.wake();
    } catch (const Error& error) {
      wake_failure = error.what();
      if (error.status() != errc::wrong_state) wake_failure = "unexpected: " + wake_failure;
    }
  });
  bool copying = false;
  for (const auto until = std::chrono::steady_clock::now() + 5s;
       !copying && std::chrono::steady_clock::now() < until;) {
    copying = reservation_status(watcher, "big").busy;
  }
  daemon.restart(SIGKILL);
  waking.join();
  EXPECT_TRUE(copying) << "the wake was never seen under way";
  EXPECT_EQ(wake_failure.find("unexpected"), std::string::npos) << wake_failure;
  if (!wake_failure.empty()) {
    EXPECT_NE(wake_failure.find("did not take effect"), std::string::npos) << wake_failure;
    ASSERT_EQ(weights.status().state, ReservationState::asleep);
    weights.wake();
  }
  ASSERT_EQ(weights.size(), kBytes);
  EXPECT_EQ(first_unstamped_page(weights.data(), kBytes, 9), kBytes);
}

// A sleep copy that a wake kept and the next sleep reuses keeps its name in the fd store. Stored
// under a second name, it was dropped by the store as a file it held already wherever the
// removal of its first name had not reached systemd (put back by hand here, as a notification
// lost under load leaves it): the restart found no copy under the name it looked for, and the
// reservation was lost.
TEST(ReservationRestart, ASleepCopyReusedByTheNextSleepIsFoundAfterASigkill) {
  const temporary_file config("gpumemd-keeps-copies", "sleep_memory_kept: 64MiB\n");
  systemd_supervisor daemon({.args = {"--config", config.path()}});
  daemon.start();
  auto client = daemon.connect("owner");
  auto weights = Reservation::create(client, 2 * kChunk,
                                     {.device = kHost, .name = "kept", .initial = 2 * kChunk});
  weights.sleep();
  const auto copy_name = [&]() -> std::string {
    for (const std::string& name : daemon.stored_names()) {
      if (name.starts_with("asleep.")) return name;
    }
    return {};
  };
  const std::string first_name = copy_name();
  ASSERT_FALSE(first_name.empty());
  unique_fd copy(::fcntl(daemon.stored_descriptor(first_name), F_DUPFD_CLOEXEC, 3));
  ASSERT_TRUE(copy);
  weights.wake();
  // Awake, its copy is no longer kept for a restart (a removal has no barrier: waited for).
  ASSERT_TRUE(daemon.wait_for([&] { return copy_name().empty(); }, 5s));
  daemon.add_stored(first_name, std::move(copy));

  const auto kept_bytes = [&] {
    return metric_value(client.metrics(), "gpumemd_sleep_memory_kept_bytes");
  };
  EXPECT_EQ(kept_bytes(), 2 * kChunk) << "the wake kept the copy";
  stamp_pages(weights.data(), weights.size(), 4);
  weights.sleep();
  EXPECT_EQ(kept_bytes(), 0) << "the sleep took the kept copy";
  const auto names = daemon.stored_names();
  EXPECT_EQ(std::ranges::count_if(
                names, [](const std::string& name) { return name.starts_with("asleep."); }),
            1);
  EXPECT_EQ(copy_name(), first_name);
  daemon.restart(SIGKILL);
  ASSERT_EQ(weights.status().state, ReservationState::asleep) << daemon.log_tail();
  weights.wake();
  ASSERT_EQ(weights.size(), 2 * kChunk);
  EXPECT_EQ(first_unstamped_page(weights.data(), weights.size(), 4), weights.size());
}

/// @p work's refusal: the error's status and text, or "not refused".
std::pair<errc, std::string> refusal_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const Error& error) {
    return {error.status(), error.what()};
  }
  return {errc::ok, "not refused"};
}

// systemd drops what passes the unit's FileDescriptorStoreMax without a word, and a reservation
// whose chunks were dropped is lost at a restart: a reservation made, grown, given a version or
// woken that would pass fd_store_max is refused while its client can still be told, and what
// was kept comes back whole.
TEST(ReservationRestart, ChunksThatWouldPassTheFdStoreAreRefusedAndWhatWasKeptComesBack) {
  // 520 less 7 connections still allowed and 256 for the daemon's own: room for about 250.
  constexpr std::size_t kStoreMax = 520;
  const temporary_file config("gpumemd-small-store", "fd_store_max: 520\nmax_connections: 8\n");
  systemd_supervisor daemon({.args = {"--config", config.path()}, .fd_store_max = kStoreMax});
  daemon.start();
  auto client = daemon.connect("owner");
  constexpr std::size_t kChunks = 150;
  const auto reserve = [&](const char* name) {
    return Reservation::create(client, 2 * kChunks * kChunk,
                               {.device = kHost, .name = name, .initial = kChunks * kChunk});
  };
  auto first = reserve("first");
  stamp_chunks(first, 6);
  const auto [code, text] = refusal_of([&] { reserve("second"); });
  EXPECT_EQ(code, errc::quota_exceeded);
  EXPECT_NE(text.find("reservation 'second': 151 more descriptors would pass fd_store_max"),
            std::string::npos)
      << text;
  EXPECT_EQ(refusal_of([&] { first.resize(2 * kChunks * kChunk); }).first, errc::quota_exceeded);
  EXPECT_EQ(refusal_of([&] { first.begin_version(kChunks * kChunk); }).first, errc::quota_exceeded);

  // Asleep, its chunks are out of the store: another takes their room, and the wake is refused.
  first.sleep();
  std::optional<Reservation> second(reserve("second"));
  EXPECT_EQ(refusal_of([&] { first.wake(); }).first, errc::quota_exceeded);
  EXPECT_EQ(first.status().state, ReservationState::asleep);
  second.reset();
  // A wake under way stores its chunks when its copy ends: their room stays taken meanwhile.
  // Asked for while the wake is still copying (seen before and after), or tried again.
  auto watcher = daemon.connect("watcher");
  const auto waking_now = [&] { return reservation_status(watcher, "first").busy; };
  bool refused_during_the_copy = false;
  for (int attempt = 0; attempt < 5 && !refused_during_the_copy; ++attempt) {
    if (attempt > 0) first.sleep();
    std::thread waking([&] { first.wake(); });
    bool copying = false;
    for (const auto until = std::chrono::steady_clock::now() + 5s;
         !copying && std::chrono::steady_clock::now() < until;) {
      copying = waking_now();
    }
    const auto during_wake = refusal_of([&] { reserve("third"); });
    refused_during_the_copy = copying && waking_now();
    waking.join();
    EXPECT_EQ(during_wake.first, errc::quota_exceeded) << during_wake.second;
  }
  EXPECT_TRUE(refused_during_the_copy) << "no wake was seen copying around the request";
  EXPECT_TRUE(chunks_stamped(first, 6));
  EXPECT_LE(daemon.stored_count(), kStoreMax - 256);

  daemon.restart(SIGKILL);
  ASSERT_EQ(first.refresh(), kChunks * kChunk) << daemon.log_tail();
  EXPECT_TRUE(chunks_stamped(first, 6));
  EXPECT_EQ(client.reservations().size(), 1u);
}

TEST(ReservationRestart, AHolderOfAReservationTheRestartCouldNotKeepLearnsItAtItsNextRefresh) {
  systemd_supervisor daemon({});
  daemon.start();
  auto owner_client = daemon.connect("owner");
  auto reader_client = daemon.connect("reader");
  auto owner = Reservation::create(owner_client, 4 * kChunk,
                                   {.device = kHost, .name = "dropped", .initial = kChunk});
  auto reader = Reservation::open(reader_client, "dropped", {.access = Access::read_only});
  EXPECT_EQ(reader.refresh(), kChunk);
  daemon.kill(SIGKILL);
  // As if systemd had not kept the reservation's chunks: the new daemon drops it.
  std::size_t removed = 0;
  for (const std::string& name : daemon.stored_names()) {
    if (name.starts_with("chunk.")) {
      daemon.remove_stored(name);
      ++removed;
    }
  }
  ASSERT_GT(removed, 0u) << "no chunk was stored";
  daemon.start();
  reader_client.ping();  // the session resumes; the reservation's notice page is left as it was
  try {
    reader.refresh();
    ADD_FAILURE() << "the refresh took the notice page's word for a reservation that is gone";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), errc::not_found) << error.what();
  }
  EXPECT_EQ(reader.state(), ReservationState::lost);
}

}  // namespace
}  // namespace gpumem::testing
