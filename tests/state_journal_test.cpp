// The state file format of daemon/restart/: batches that a crash cuts short are ignored whole,
// and what a snapshot plus its journal replay to is the state after the last whole batch.
#include <gtest/gtest.h>

#include <string>

#include "restart/journal.hpp"
#include "restart/record_codec.hpp"
#include "support/state_batches.hpp"

namespace gpumem::daemon::restart {
namespace {

using testing::record_change;

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto view = std::as_bytes(std::span(text.data(), text.size()));
  return {view.begin(), view.end()};
}

record_change upsert(record_type type, std::uint64_t id, const std::string& text) {
  return {{type, id}, bytes_of(text)};
}

std::vector<std::byte> journal_of(std::uint64_t generation,
                                  const std::vector<std::vector<record_change>>& batches) {
  std::vector<std::byte> file = file_header(file_kind::journal, generation);
  for (const auto& changes : batches) {
    const std::vector<std::byte> framed = testing::batch_of(changes);
    file.insert(file.end(), framed.begin(), framed.end());
  }
  return file;
}

TEST(StateJournal, Crc32IsTheIeeeOne) {
  // As zlib.crc32 gives them: lengths that end on 8 bytes, in the middle of them and before
  // them, so that both the 8-byte steps and the bytes after them are checked.
  EXPECT_EQ(crc32(bytes_of("")), 0u);
  EXPECT_EQ(crc32(bytes_of("a")), 0xE8B7BE43u);
  EXPECT_EQ(crc32(bytes_of("12345678")), 0x9AE0DAAFu);
  EXPECT_EQ(crc32(bytes_of("123456789")), 0xCBF43926u);
  EXPECT_EQ(crc32(bytes_of("The quick brown fox jumps over the lazy dog")), 0x414FA339u);
  std::vector<std::byte> pattern(1021);
  for (std::size_t index = 0; index < pattern.size(); ++index) {
    pattern[index] = static_cast<std::byte>((index * 7 + 3) % 256);
  }
  EXPECT_EQ(crc32(pattern), 0x2CDEC045u);
  EXPECT_EQ(crc32_by_tables(pattern), 0x2CDEC045u);
  EXPECT_EQ(crc32_by_tables(bytes_of("The quick brown fox jumps over the lazy dog")), 0x414FA339u);
}

TEST(StateJournal, Crc32ByFoldingIsTheSameAsBitByBit) {
  // The folding path (a CPU with carry-less multiplication) and the tables against the
  // definition, one bit at a time, at every length to 300 bytes and from unaligned starts:
  // whole 16-byte steps, the bytes after them, and the tables' own 8-byte steps.
  const auto bit_by_bit = [](std::span<const std::byte> bytes) {
    std::uint32_t value = 0xFFFFFFFFu;
    for (const std::byte each : bytes) {
      value ^= static_cast<std::uint32_t>(each);
      for (int bit = 0; bit < 8; ++bit) value = (value >> 1) ^ (0xEDB88320u & (0u - (value & 1)));
    }
    return value ^ 0xFFFFFFFFu;
  };
  std::vector<std::byte> noise(300 + 3);
  std::uint32_t seed = 12345;
  for (std::byte& each : noise) {
    seed = seed * 1103515245u + 12345u;
    each = static_cast<std::byte>(seed >> 24);
  }
  for (std::size_t start = 0; start < 4; ++start) {
    for (std::size_t length = 0; start + length <= noise.size() && length <= 300; ++length) {
      const auto bytes = std::span<const std::byte>(noise).subspan(start, length);
      const std::uint32_t expected = bit_by_bit(bytes);
      ASSERT_EQ(crc32(bytes), expected) << length << " bytes from " << start;
      ASSERT_EQ(crc32_by_tables(bytes), expected) << length << " bytes from " << start;
    }
  }
  if (!crc32_folds()) GTEST_SKIP() << "this CPU has no PCLMULQDQ: only the tables were checked";
}

TEST(StateJournal, AReusedWriterKeepsItsRoomAndWritesOnlyWhatIsPut) {
  std::vector<std::byte> large(1 << 20, std::byte{0x5a});
  const std::size_t capacity = large.capacity();
  record_writer out(std::move(large));
  out.put(std::uint32_t{0x01020304});
  out.put_bytes(bytes_of("ab"));
  EXPECT_EQ(out.view().size(), 4u + 4u + 2u);
  EXPECT_EQ(out.view()[0], std::byte{0x04}) << "little-endian";
  std::vector<std::byte> taken = std::move(out).take();
  EXPECT_EQ(taken.size(), 10u) << "none of the reused buffer's old bytes";
  EXPECT_EQ(taken.capacity(), capacity) << "its room, for the next batch";
}

// The journal's writer puts each record straight into the batch (batch_builder): what it
// builds is, byte for byte, the batch every daemon since the format's version 1 wrote and reads
// (an upgraded daemon replays the journal of the one before), whatever the buffer it reused
// held, and a record ended as not present is written erased, whatever was put into it before.
TEST(StateJournal, ABuiltBatchHasTheFormatsBytes) {
  // "GATB", the body's length and CRC-32 (as zlib.crc32 gives it), the count of records, then
  // each: type, id, whether it has a body, and the body's length and bytes.
  const std::vector<std::uint8_t> expected{
      0x47, 0x41, 0x54, 0x42, 0x2d, 0x00, 0x00, 0x00, 0xb2, 0xca, 0x02, 0xe5, 0x03, 0x00, 0x00,
      0x00, 0x03, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x00, 0x00, 0x00,
      0x6f, 0x6e, 0x65, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x03,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00};
  const auto expected_bytes = std::as_bytes(std::span(expected));
  for (std::vector<std::byte> reused : {std::vector<std::byte>{}, bytes_of("left over bytes")}) {
    batch_builder built(std::move(reused));
    built.begin_record({record_type::object, 1}).append(bytes_of("one"));
    built.end_record(true);
    built.begin_record({record_type::client, 2}).put(std::uint64_t{42});
    built.end_record(false);
    built.begin_record({record_type::object, 3});
    built.end_record(true);
    const std::vector<std::byte> taken = std::move(built).take();
    EXPECT_TRUE(
        std::equal(taken.begin(), taken.end(), expected_bytes.begin(), expected_bytes.end()));
  }
}

TEST(StateJournal, BatchesApplyInOrderAndErase) {
  const auto file = journal_of(
      7, {{upsert(record_type::object, 1, "one"), upsert(record_type::client, 1, "c")},
          {upsert(record_type::object, 1, "one again"), {{record_type::client, 1}, std::nullopt}}});
  record_map state;
  const replay_result result = replay(file, file_kind::journal, 7, state);
  EXPECT_EQ(result.batches, 2u);
  EXPECT_FALSE(result.torn_tail);
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state.at({record_type::object, 1}), bytes_of("one again"));
}

TEST(StateJournal, ABatchCutShortAtAnyByteIsIgnoredWhole) {
  const auto whole = journal_of(3, {{upsert(record_type::object, 1, "first")},
                                    {upsert(record_type::object, 1, "second"),
                                     upsert(record_type::object, 2, "also second")}});
  const std::size_t first_end = journal_of(3, {{upsert(record_type::object, 1, "first")}}).size();
  for (std::size_t cut = first_end; cut < whole.size(); ++cut) {
    record_map state;
    const auto result = replay(std::span(whole).first(cut), file_kind::journal, 3, state);
    EXPECT_EQ(result.batches, 1u) << "cut at " << cut;
    EXPECT_EQ(result.torn_tail, cut > first_end) << "cut at " << cut;
    EXPECT_EQ(result.end, first_end) << "cut at " << cut;
    ASSERT_EQ(state.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(state.at({record_type::object, 1}), bytes_of("first"));
  }
}

// A journal is made as large as its room (journal_file.hpp): the zeroes after its last batch
// are its clean end, while a batch cut short before them is still a torn one.
TEST(StateJournal, ZeroBytesAfterTheLastBatchAreRoomNotATornBatch) {
  const auto whole = journal_of(
      3, {{upsert(record_type::object, 1, "first")}, {upsert(record_type::object, 1, "second")}});
  auto with_room = whole;
  with_room.resize(whole.size() + 4096);
  record_map state;
  const auto result = replay(with_room, file_kind::journal, 3, state);
  EXPECT_EQ(result.batches, 2u);
  EXPECT_FALSE(result.torn_tail);
  EXPECT_EQ(result.end, whole.size());
  EXPECT_EQ(state.at({record_type::object, 1}), bytes_of("second"));

  const std::size_t first_end = journal_of(3, {{upsert(record_type::object, 1, "first")}}).size();
  auto cut_then_room = std::vector<std::byte>(whole.begin(), whole.end() - 3);
  cut_then_room.resize(whole.size() + 4096);
  record_map cut_state;
  const auto cut = replay(cut_then_room, file_kind::journal, 3, cut_state);
  EXPECT_EQ(cut.batches, 1u);
  EXPECT_TRUE(cut.torn_tail);
  EXPECT_EQ(cut.end, first_end);
}

TEST(StateJournal, AFlippedBitEndsTheReplayBeforeItsBatch) {
  auto file = journal_of(
      3, {{upsert(record_type::object, 1, "first")}, {upsert(record_type::object, 1, "second")}});
  file[file.size() - 2] ^= std::byte{0x10};
  record_map state;
  const auto result = replay(file, file_kind::journal, 3, state);
  EXPECT_EQ(result.batches, 1u);
  EXPECT_TRUE(result.torn_tail);
  EXPECT_EQ(result.whole_batches_after, 0u) << "the last batch: it may have been cut short";
  EXPECT_EQ(state.at({record_type::object, 1}), bytes_of("first"));
}

TEST(StateJournal, ADamagedBatchWithWholeOnesAfterItIsToldApartFromACutShortOne) {
  const auto first = journal_of(3, {{upsert(record_type::object, 1, "first")}});
  auto file = journal_of(3, {{upsert(record_type::object, 1, "first")},
                             {upsert(record_type::object, 1, "second")},
                             {upsert(record_type::object, 2, "third")},
                             {upsert(record_type::object, 3, "fourth")}});
  file[first.size() + 14] ^= std::byte{0x10};  // in the second batch's body
  file.resize(file.size() + 4096);             // and the journal's room after the last
  record_map state;
  const auto result = replay(file, file_kind::journal, 3, state);
  EXPECT_EQ(result.batches, 1u) << "nothing after the damage is replayed";
  EXPECT_EQ(result.end, first.size());
  EXPECT_TRUE(result.torn_tail);
  EXPECT_EQ(result.whole_batches_after, 2u);
  EXPECT_EQ(state.size(), 1u);
}

TEST(StateJournal, AHeaderOfAnotherKindOrGenerationIsRefused) {
  const auto file = journal_of(3, {});
  record_map state;
  EXPECT_THROW(replay(file, file_kind::snapshot, 3, state), format_error);
  EXPECT_THROW(replay(file, file_kind::journal, 4, state), format_error);
  EXPECT_THROW(replay(std::span(file).first(5), file_kind::journal, 3, state), format_error);
  EXPECT_THROW(replay(bytes_of("not a state file at all, no"), file_kind::journal, 3, state),
               format_error);
}

TEST(StateJournal, ReadersNeverReadPastTheirBytes) {
  record_writer out;
  out.put(std::uint32_t{1000000});  // a count far beyond what follows
  record_reader in(out.view());
  EXPECT_THROW(in.get_count(8), format_error);
  record_reader short_string(bytes_of("\x05\x00\x00\x00ab"));
  EXPECT_THROW(short_string.get_string(), format_error);
}

}  // namespace
}  // namespace gpumem::daemon::restart
