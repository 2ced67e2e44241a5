#pragma once
/// @file
/// @brief How the daemon's state is laid out in its memfds (daemon/restart/): a snapshot,
/// written whole and sealed, and a journal of the changes since, appended in batches (two
/// journals while a fold into the next snapshot is made: state_store.hpp). Both kinds are
/// a header and then batches; a batch is a set of records (a key, and the record's bytes or
/// "erased") with its length and CRC-32 in front, so that a batch cut short by a crash is
/// recognised and ignored whole: a reader sees the state as it was after some request, never
/// in the middle of one.

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "restart/record_codec.hpp"

namespace gpumem::daemon::restart {

enum class record_type : std::uint8_t { meta = 1, client = 2, object = 3, pool = 4, page = 5 };

struct record_key {
  record_type type;
  std::uint64_t id;
  auto operator<=>(const record_key&) const = default;
};

/// Every live record by key: what replaying a snapshot and its journals gives.
using record_map = std::map<record_key, std::vector<std::byte>>;

enum class file_kind : std::uint32_t { snapshot = 1, journal = 2 };

/// @brief The first bytes of a snapshot or journal of @p generation.
std::vector<std::byte> file_header(file_kind kind, std::uint64_t generation);

/// @brief Builds one batch in a single buffer, each record put straight into it: the journal's
/// writer makes no buffer per record, and reuses the batch's own from one request to the next.
class batch_builder {
 public:
  /// @param reused a buffer whose room is kept; its bytes are dropped.
  explicit batch_builder(std::vector<std::byte> reused = {});
  /// @brief Starts the record of @p key: what is put into the writer returned, up to
  /// end_record(), is its bytes.
  record_writer& begin_record(record_key key);
  /// @brief Ends the record begun last: its bytes, or, where it is not @p present, the record
  /// erased (anything put into it is dropped).
  void end_record(bool present);
  /// @brief The batch, framed (magic, length, CRC-32), ready to append.
  std::vector<std::byte> take() &&;

 private:
  record_writer out_;
  std::uint32_t records_ = 0;
  std::size_t record_start_ = 0;
  bool in_record_ = false;  ///< begun and not ended: a batch taken then would not replay
};

struct replay_result {
  std::size_t batches = 0;
  std::size_t end = 0;     ///< where the last whole batch ends (the header's end if none)
  bool torn_tail = false;  ///< non-zero bytes after the last whole batch were ignored
  /// Whole batches found after the first one that is not: then that one was damaged, not cut
  /// short by a crash (only the last batch can be), and these were ignored with it.
  std::size_t whole_batches_after = 0;
};

/// Called for each record of each whole batch, in order: its key, and its bytes (in the file
/// replayed) or nullopt where the batch erases it.
using record_visitor =
    std::function<void(record_key key, std::optional<std::span<const std::byte>> body)>;

/// @brief Visits the records of the batches of @p file, in order, up to the first batch that is
/// not whole (a crash while appending), which is ignored with what follows it. Zero bytes after
/// the last batch are room a journal was made with (journal_file.hpp), not a torn batch.
/// @throws format_error when the header is not one of @p kind and @p generation, or a whole
/// batch is malformed (records already visited stay visited: the caller drops what it made).
replay_result replay(std::span<const std::byte> file, file_kind kind, std::uint64_t generation,
                     const record_visitor& visit);
/// @brief The same, applying each record to @p into: the state after the last whole batch.
replay_result replay(std::span<const std::byte> file, file_kind kind, std::uint64_t generation,
                     record_map& into);

}  // namespace gpumem::daemon::restart
