#pragma once
/// @file
/// @brief A reservation as its holders see it: the version they are to map, older versions some
/// holder still maps, the draft its owner writes, and its sleep.
///
/// Holders are told of every change through the notice page; each holder's answer to
/// get_chunks records what it maps from then on (a version, or nothing). An older version's
/// chunks go when no holder maps it. A sleep waits (draining) until no holder maps anything,
/// then the bytes go to a memfd the daemon owns (copying out) and every chunk goes (asleep); a
/// wake makes new chunks and copies the bytes back (copying in). The copies run on a worker
/// thread: while one runs, the loop leaves the chunks and the memfd to it.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumem/proto/errc.hpp"
#include "gpumem/proto/messages.hpp"
#include "ledger/ledger.hpp"
#include "memory/notice_page.hpp"
#include "memory/reservation.hpp"
#include "memory/sleep_copy.hpp"

namespace gpumem::daemon {

class versioned_reservation {
 public:
  enum class phase { awake, draining, copying_out, asleep, copying_in, lost };

  versioned_reservation(std::unique_ptr<reservation> first, notice_page notice);

  /// @name What holders map.
  /// @{
  std::int32_t device() const noexcept { return device_; }
  std::uint64_t max_size() const noexcept { return max_size_; }
  std::uint64_t chunk_size() const noexcept { return chunk_size_; }
  std::uint64_t version() const noexcept { return version_; }
  /// Bytes of the current version, asleep or awake.
  std::uint64_t committed() const noexcept { return committed_; }
  phase current_phase() const noexcept { return phase_; }
  proto::reservation_state state() const noexcept;
  const notice_page& notice() const noexcept { return notice_; }
  /// The current version's chunks; nullptr unless holders may map them (awake).
  const reservation* current() const noexcept;
  /// @brief The current version, for its owner to resize.
  /// @throws request_error(wrong_state) after a later version was committed, or unless awake.
  reservation& resizable();
  /// @brief After a resize: holders map the change at their next refresh.
  void resized();
  /// @}

  /// @name Holders: who maps which version (0: nothing), and who may write version 1.
  /// @{
  void add_writer(client_id holder) { writers_.insert(holder); }
  bool may_write(client_id holder) const noexcept { return writers_.contains(holder); }
  const std::set<client_id>& writers() const noexcept { return writers_; }
  void maps_current(client_id holder);
  void maps_nothing(client_id holder);
  /// A holder let go for good; its draft, if it wrote one, goes.
  void forget(client_id holder);
  std::vector<client_id> holders_mapping() const;
  /// The oldest version some holder maps; 0 when none maps any.
  std::uint64_t oldest_mapped() const noexcept;
  std::uint32_t holders_on(std::uint64_t version) const noexcept;
  std::uint32_t holders_behind() const noexcept;
  /// Chunks kept for older versions and the draft.
  std::uint64_t retained_bytes() const noexcept;
  /// @}

  /// @name The owner's draft of the next version.
  /// @{
  /// @throws request_error(wrong_state) while a draft is open or unless awake.
  void check_draft_may_begin() const;
  /// @throws request_error(wrong_state) as check_draft_may_begin().
  std::uint64_t begin_draft(client_id writer, std::unique_ptr<reservation> chunks);
  const reservation* draft(client_id writer, std::uint64_t draft_version) const;
  std::uint64_t draft_version() const noexcept { return draft_ ? version_ + 1 : 0; }
  /// @throws request_error(not_found) for no such draft of @p writer, (busy) when it is
  /// still mapped writable (the host backend's seal).
  void commit_draft(client_id writer, std::uint64_t draft_version);
  void abandon_draft(client_id writer, std::uint64_t draft_version);
  /// @}

  /// @name Sleep and wake, in the order they happen. Each step that changes what holders map
  /// publishes on the notice page.
  /// @{
  /// @throws request_error(wrong_state), naming the reservation as @p named ("reservation 'w'
  /// (id 3)"), unless awake with no draft open.
  void begin_sleep(std::string_view named, bool discard);
  bool discards() const noexcept { return discard_; }
  /// Draining, and no holder maps anything any more: the copy may start.
  bool ready_to_copy_out() const noexcept;
  /// @return the chunks the worker copies from (nullptr for a discarding sleep).
  const reservation* begin_copy_out();
  /// The bytes are safe in @p copy (empty for a discarding sleep): the chunks go.
  void finish_sleep(std::optional<sleep_copy> copy);
  /// @throws request_error(wrong_state), naming the reservation as @p named, unless asleep.
  void check_may_wake(std::string_view named) const;
  /// @throws request_error(wrong_state) naming @p named unless it is awake with no draft.
  void check_may_sleep(std::string_view named) const;
  /// @return the new chunks, for the worker to fill from host_copy() (or clear).
  reservation& begin_copy_in(std::unique_ptr<reservation> fresh);
  /// @return the host copy the bytes came back from (none after a discarding sleep), for the
  /// book to keep for the next sleep or to let go of.
  std::optional<sleep_copy> finish_wake();
  /// The step under way failed: back to awake (sleep) or asleep (wake), nothing lost.
  void fail(proto::errc code, std::string reason);
  /// @brief Its owner let go while it slept: holders learn it is gone.
  /// @return the host copy of its bytes, for the caller to let go of.
  std::optional<sleep_copy> lose();
  const sleep_copy* host_copy() const noexcept { return host_copy_ ? &*host_copy_ : nullptr; }
  /// For the wake's worker, which pins the copy the first time (a copy adopted at a restart).
  sleep_copy* host_copy_to_wake_from() noexcept { return host_copy_ ? &*host_copy_ : nullptr; }
  /// @brief Keeps a woken copy, pages made and pinned, for the next sleep of as many bytes. The
  /// caller took any kept before (take_kept_copy()).
  void keep_copy(sleep_copy copy) noexcept { kept_copy_ = std::move(copy); }
  /// Bytes of the copy kept for the next sleep; 0 for none.
  std::uint64_t kept_bytes() const noexcept { return kept_copy_ ? kept_copy_->bytes : 0; }
  /// @brief Hands the kept copy over, to reuse or to let go of off the loop; none is kept after.
  std::optional<sleep_copy> take_kept_copy() noexcept { return std::exchange(kept_copy_, {}); }
  /// Counts sleeps begun: a deadline set for one ignores later ones. It also names the sleep
  /// copy in systemd's fd store, so a wake leaves it as it is: stored again under a new name,
  /// the copy would be dropped as a descriptor the store holds already, and the old name's
  /// removal would then lose the only one kept.
  std::uint64_t attempt() const noexcept { return attempt_; }
  proto::reservation_status status(object_id id) const;
  /// @}

  /// @name Re-adoption (daemon/restart/).
  /// @{
  struct saved_version {
    std::uint64_t version;
    std::unique_ptr<reservation> chunks;
  };
  struct saved {
    std::uint64_t version = 1;
    std::uint64_t committed = 0;
    std::unique_ptr<reservation> current;  ///< nullptr while asleep
    std::vector<saved_version> older;
    std::unique_ptr<reservation> draft;
    client_id draft_writer = 0;
    std::map<client_id, std::uint64_t> mapped;
    std::set<client_id> writers;
    std::uint64_t attempt = 0;
    std::optional<sleep_copy> host_copy;  ///< asleep: the bytes (none after a discarding sleep)
    bool asleep = false;
    bool lost = false;
  };
  versioned_reservation(std::int32_t device, std::uint64_t max_size, std::uint64_t chunk_size,
                        saved state, notice_page notice);
  const std::map<std::uint64_t, std::unique_ptr<reservation>>& older() const noexcept {
    return older_;
  }
  const std::map<client_id, std::uint64_t>& mapped() const noexcept { return mapped_; }
  client_id draft_writer() const noexcept { return draft_writer_; }
  const reservation* draft_chunks() const noexcept { return draft_.get(); }
  /// The current version's chunks in any phase (nullptr asleep): a copy may be reading them.
  const reservation* current_for_saving() const noexcept { return current_.get(); }
  /// @}

 private:
  /// Where a sleep or wake stands, in the words of a refusal: "a wake is under way".
  const char* where_it_stands() const noexcept;
  void publish() noexcept;
  void retire_unmapped() noexcept;

  std::int32_t device_;
  std::uint64_t max_size_;
  std::uint64_t chunk_size_;
  notice_page notice_;
  std::uint64_t version_ = 1;
  std::uint64_t committed_ = 0;
  phase phase_ = phase::awake;
  std::unique_ptr<reservation> current_;
  /// Older versions some holder still maps, by version.
  std::map<std::uint64_t, std::unique_ptr<reservation>> older_;
  std::unique_ptr<reservation> draft_;
  client_id draft_writer_ = 0;
  std::unique_ptr<reservation> waking_;
  std::map<client_id, std::uint64_t> mapped_;
  std::set<client_id> writers_;
  std::optional<sleep_copy> host_copy_;
  /// Awake: the copy of the last sleep, kept for the next (reservation_book decides).
  std::optional<sleep_copy> kept_copy_;
  bool discard_ = false;
  std::uint64_t attempt_ = 0;
  proto::errc failure_ = proto::errc::ok;
  std::string failure_reason_;
};

}  // namespace gpumem::daemon
