#include "restart/journal.hpp"

#include <algorithm>
#include <cassert>
#include <optional>
#include <span>

namespace gpumem::daemon::restart {

namespace {
constexpr std::uint64_t kFileMagic = 0x31'6473'6d65'6d70'67ull;  // "gpmemsd1", little-endian
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::uint32_t kBatchMagic = 0x4254'4147u;  // "GATB"
constexpr std::size_t kHeaderSize = 8 + 4 + 4 + 8;
constexpr std::size_t kBatchHeaderSize = 4 + 4 + 4;  // magic, body length, body CRC-32
constexpr std::size_t kBatchLengthAt = 4;
constexpr std::size_t kBatchChecksumAt = 8;

/// The body length the batch frame at the start of @p bytes gives, when its magic is right and
/// the body fits in @p bytes (its checksum unchecked).
std::optional<std::size_t> framed_length(std::span<const std::byte> bytes) {
  if (bytes.size() < kBatchHeaderSize) return std::nullopt;
  record_reader frame(bytes.first(kBatchHeaderSize));
  const auto magic = frame.get<std::uint32_t>();
  const auto length = frame.get<std::uint32_t>();
  if (magic != kBatchMagic || length > bytes.size() - kBatchHeaderSize) return std::nullopt;
  return length;
}

/// The body of the batch at the start of @p bytes, when it is whole: framed, and its CRC-32
/// matches.
std::optional<std::span<const std::byte>> whole_batch(std::span<const std::byte> bytes) {
  const std::optional<std::size_t> length = framed_length(bytes);
  if (!length) return std::nullopt;
  record_reader frame(bytes.subspan(kBatchChecksumAt, 4));
  const auto checksum = frame.get<std::uint32_t>();
  const std::span<const std::byte> body = bytes.subspan(kBatchHeaderSize, *length);
  if (crc32(body) != checksum) return std::nullopt;
  return body;
}
}  // namespace

std::vector<std::byte> file_header(file_kind kind, std::uint64_t generation) {
  record_writer out;
  out.put(kFileMagic);
  out.put(kFormatVersion);
  out.put(kind);
  out.put(generation);
  return std::move(out).take();
}

batch_builder::batch_builder(std::vector<std::byte> reused) : out_(std::move(reused)) {
  out_.put(kBatchMagic);
  out_.put(std::uint32_t{0});  // the body's length and CRC-32, written over in take()
  out_.put(std::uint32_t{0});
  out_.put(std::uint32_t{0});  // the count of records, likewise
}

record_writer& batch_builder::begin_record(record_key key) {
  assert(!in_record_ && "begin_record() twice without end_record()");
  in_record_ = true;
  record_start_ = out_.size();
  out_.put(key.type);
  out_.put(key.id);
  out_.put(true);
  out_.put(std::uint32_t{0});  // the record's length, written over in end_record()
  return out_;
}

void batch_builder::end_record(bool present) {
  assert(in_record_ && "end_record() without begin_record()");
  in_record_ = false;
  constexpr std::size_t kKeyBytes = 1 + 8;
  constexpr std::size_t kLengthAt = kKeyBytes + 1;
  const std::size_t body_start = record_start_ + kLengthAt + 4;
  if (present) {
    out_.put_at(record_start_ + kLengthAt, static_cast<std::uint32_t>(out_.size() - body_start));
  } else {
    out_.truncate(record_start_ + kKeyBytes);
    out_.put(false);
  }
  ++records_;
}

std::vector<std::byte> batch_builder::take() && {
  assert(!in_record_ && "take() with a record begun and not ended");
  out_.put_at(kBatchHeaderSize, records_);
  const std::span<const std::byte> body = out_.view().subspan(kBatchHeaderSize);
  out_.put_at(kBatchLengthAt, static_cast<std::uint32_t>(body.size()));
  out_.put_at(kBatchChecksumAt, crc32(body));
  return std::move(out_).take();
}

replay_result replay(std::span<const std::byte> file, file_kind kind, std::uint64_t generation,
                     const record_visitor& visit) {
  record_reader header(file.first(std::min(file.size(), kHeaderSize)));
  if (header.get<std::uint64_t>() != kFileMagic) throw format_error("not a gpumemd state file");
  if (header.get<std::uint32_t>() != kFormatVersion) {
    throw format_error("a state file of another format version");
  }
  if (header.get<file_kind>() != kind || header.get<std::uint64_t>() != generation) {
    throw format_error("a state file of another kind or generation than its name says");
  }
  replay_result result;
  std::span<const std::byte> rest = file.subspan(kHeaderSize);
  while (!rest.empty()) {
    const std::optional<std::span<const std::byte>> body = whole_batch(rest);
    if (!body) break;
    record_reader records(*body);
    // A batch whose CRC matches was written whole by the daemon: a malformed one is a bug,
    // and format_error says so.
    for (std::size_t count = records.get_count(1 + 8 + 1); count > 0; --count) {
      record_key key{};
      key.type = records.get<record_type>();
      key.id = records.get<std::uint64_t>();
      if (records.get_bool()) {
        visit(key, records.get_bytes());
      } else {
        visit(key, std::nullopt);
      }
    }
    ++result.batches;
    rest = rest.subspan(kBatchHeaderSize + body->size());
  }
  result.end = file.size() - rest.size();
  result.torn_tail =
      std::any_of(rest.begin(), rest.end(), [](std::byte each) { return each != std::byte{0}; });
  // Past a batch whose frame still gives its length (its body damaged), count the whole batches
  // that follow, which only damage leaves behind: for the log, never replayed.
  for (std::optional<std::size_t> next = framed_length(rest); next;) {
    rest = rest.subspan(kBatchHeaderSize + *next);
    const auto following = whole_batch(rest);
    if (!following) break;
    ++result.whole_batches_after;
    next = following->size();
  }
  return result;
}

replay_result replay(std::span<const std::byte> file, file_kind kind, std::uint64_t generation,
                     record_map& into) {
  return replay(file, kind, generation,
                [&into](record_key key, std::optional<std::span<const std::byte>> body) {
                  if (body) {
                    into.insert_or_assign(key, std::vector<std::byte>(body->begin(), body->end()));
                  } else {
                    into.erase(key);
                  }
                });
}

}  // namespace gpumem::daemon::restart
