// The state snapshot memfd (daemon/restart/snapshot_file.hpp): sealed once written, and folded
// from the previous snapshot and its journal into the state their replay gives, which is what a
// restarted daemon reads whichever of the two it finds.
#include "restart/snapshot_file.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "restart/journal.hpp"
#include "restart/journal_file.hpp"
#include "support/state_batches.hpp"

namespace gpumem::daemon::restart {
namespace {

using testing::record_change;

constexpr std::uint64_t kGeneration = 8;

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto view = std::as_bytes(std::span(text.data(), text.size()));
  return {view.begin(), view.end()};
}

record_change upsert(record_type type, std::uint64_t id, const std::string& text) {
  return {{type, id}, bytes_of(text)};
}

record_change erased(record_type type, std::uint64_t id) {
  return {{type, id}, std::nullopt};
}

snapshot_file snapshot_of(const std::vector<record_change>& records) {
  return seal_snapshot(kGeneration, testing::batch_of(records));
}

record_map replayed(const snapshot_file& snapshot, std::uint64_t generation) {
  record_map state;
  const os::mapping mapped = map_state_file(snapshot.fd.get());
  EXPECT_EQ(mapped.size(), snapshot.size);
  const replay_result result = replay(mapped_bytes(mapped), file_kind::snapshot, generation, state);
  EXPECT_EQ(result.end, snapshot.size);
  EXPECT_FALSE(result.torn_tail);
  return state;
}

TEST(SnapshotFile, IsSealedAgainstAnyChangeOnceWritten) {
  const snapshot_file snapshot = snapshot_of({upsert(record_type::object, 1, "one")});
  const int seals = ::fcntl(snapshot.fd.get(), F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  EXPECT_LT(::pwrite(snapshot.fd.get(), "x", 1, 0), 0);
  const record_map state = replayed(snapshot, kGeneration);
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state.at({record_type::object, 1}), bytes_of("one"));
}

// The fold is the snapshot with the journal replayed over it: records changed, erased, made and
// made again, each once in the next generation's snapshot, as a restart would read them.
TEST(SnapshotFile, AFoldHoldsWhatTheSnapshotAndItsJournalReplayTo) {
  const std::vector<record_change> before = {
      upsert(record_type::meta, 0, "counters"), upsert(record_type::client, 1, "client"),
      upsert(record_type::object, 1, "kept"),   upsert(record_type::object, 2, "changed"),
      upsert(record_type::object, 3, "erased"), upsert(record_type::pool, 1, "pool")};
  const snapshot_file snapshot = snapshot_of(before);
  journal_file journal = journal_file::create(kGeneration, 1 << 16);
  const std::vector<std::vector<record_change>> batches = {
      {upsert(record_type::object, 2, "changed once"), erased(record_type::object, 3),
       upsert(record_type::meta, 0, "counters again")},
      {upsert(record_type::object, 4, "made"), upsert(record_type::object, 2, "changed twice")},
      {erased(record_type::object, 4), upsert(record_type::page, 7, "page")},
      {upsert(record_type::object, 4, "made again"), erased(record_type::client, 9)}};
  for (const auto& batch : batches) ASSERT_TRUE(journal.append(testing::batch_of(batch)));

  record_map expected;
  replay(mapped_bytes(map_state_file(snapshot.fd.get())), file_kind::snapshot, kGeneration,
         expected);
  replay(journal.written(), file_kind::journal, kGeneration, expected);
  const snapshot_file folded = fold_snapshot(snapshot.fd.get(), kGeneration, journal.written());
  const record_map state = replayed(folded, kGeneration + 1);
  EXPECT_EQ(state, expected);
  EXPECT_EQ(state.size(), 7u);
  EXPECT_EQ(state.at({record_type::object, 2}), bytes_of("changed twice"));
  EXPECT_EQ(state.at({record_type::object, 4}), bytes_of("made again"));
  EXPECT_FALSE(state.contains({record_type::object, 3}));
  EXPECT_EQ(::fcntl(folded.fd.get(), F_GET_SEALS) & F_SEAL_WRITE, F_SEAL_WRITE);
}

// The journal handed to a fold ends at its last whole batch; bytes of one cut short after it
// are left out, as a restart leaves them out.
TEST(SnapshotFile, AFoldLeavesOutABatchCutShort) {
  const snapshot_file snapshot = snapshot_of({upsert(record_type::object, 1, "first")});
  journal_file journal = journal_file::create(kGeneration, 1 << 16);
  ASSERT_TRUE(
      journal.append(testing::batch_of(std::vector{upsert(record_type::object, 1, "second")})));
  std::vector<std::byte> bytes(journal.written().begin(), journal.written().end());
  const std::vector<std::byte> cut =
      testing::batch_of(std::vector{upsert(record_type::object, 1, "never whole")});
  bytes.insert(bytes.end(), cut.begin(), cut.end() - 2);
  const record_map state =
      replayed(fold_snapshot(snapshot.fd.get(), kGeneration, bytes), kGeneration + 1);
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state.at({record_type::object, 1}), bytes_of("second"));
}

TEST(SnapshotFile, AFoldOfFilesOfAnotherGenerationIsRefused) {
  const snapshot_file snapshot = snapshot_of({upsert(record_type::object, 1, "one")});
  journal_file journal = journal_file::create(kGeneration + 1, 1 << 16);
  EXPECT_THROW(fold_snapshot(snapshot.fd.get(), kGeneration, journal.written()), format_error);
  EXPECT_THROW(fold_snapshot(snapshot.fd.get(), kGeneration + 1, journal.written()), format_error);
}

}  // namespace
}  // namespace gpumem::daemon::restart
