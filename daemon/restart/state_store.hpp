#pragma once
/// @file
/// @brief daemon/restart/: what lets a restarted gpumemd carry on where the previous one
/// stopped, killed or not.
///
/// Under systemd (NOTIFY_SOCKET), the state store keeps in the service's fd store every
/// descriptor that holds memory or state (pool instances, reservation chunks, lock pages and
/// their signal pages, each client's pidfd) and the books themselves, as a sealed snapshot memfd
/// plus a journal memfd of the changes since. Changes are appended before any reply goes out
/// (books::write_changes), a batch per turn of the loop. Once the journal outgrows the snapshot,
/// the loop goes on in the next generation's journal while a thread of its own folds the
/// snapshot and the old journal into the next snapshot (snapshot_file.hpp), which then replaces
/// both: the loop never holds a request up for a pass over the books. A whole snapshot is
/// written from the books on the loop only where the journal cannot go on: a write failed, or a
/// batch finds no room. A descriptor is stored before the first record that refers to it and
/// removed after the last one that did, so the stored fds cover every state a crash can leave:
/// a snapshot with the journals stored beside it replayed over it.
///
/// When systemd hands the stored fds back (LISTEN_FDS), the store reads the newest readable
/// snapshot and its journal, and the next generation's journal where a fold was under way, and
/// re-adopts: clients (their process watched through the stored
/// pidfd), objects with their holders, pools (host pools whole; CUDA pools as
/// adopted_device_pool), reservations, lock pages and slots. Whatever cannot be read is logged
/// and the daemon starts clean; whatever cannot be adopted alone is logged and dropped.
/// Without NOTIFY_SOCKET nothing is kept: a restarted daemon starts clean.
/// May include: daemon/books.hpp (and what it includes), daemon/systemd/, daemon/memory/
/// pool_factory.hpp and background.hpp. Nothing includes daemon/restart/ but main.cpp.

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "books.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "memory/background.hpp"
#include "restart/journal.hpp"
#include "restart/journal_file.hpp"
#include "restart/snapshot_file.hpp"
#include "restart/state_records.hpp"
#include "systemd/activation.hpp"

namespace gpumem::daemon::restart {

class state_store final : public state_keeper {
 public:
  /// @param passed what systemd passed at start, less the listening socket.
  explicit state_store(std::vector<systemd::passed_fd> passed);
  state_store(const state_store&) = delete;
  state_store& operator=(const state_store&) = delete;

  /// @brief Whether state is kept: the daemon runs under systemd's notify socket.
  bool active() const noexcept { return active_; }
  bool failing() const noexcept override { return failing_; }
  std::uint64_t failed_writes() const noexcept override { return failed_writes_; }
  std::size_t stored_descriptors() const noexcept override { return stored_.size(); }

  /// @brief For the books' constructor: re-adopts the newest readable snapshot among the
  /// passed fds, if any. @throws format_error when no passed snapshot is readable (the caller
  /// starts clean, with books made again without it).
  void adopt(books& state);
  /// @brief Once the books are made: reclaims what clients that died while no daemon ran held,
  /// stores what is not stored yet, goes on with the journal read back (or writes a whole
  /// snapshot), lets go of stored fds nothing refers to, and becomes the books' keeper. A no-op
  /// when not active.
  /// @param readopted whether @p state is the books adopt() filled (false: they were made again
  /// without it, after it failed).
  void start(books& state, bool readopted);
  /// @brief Adopted clients whose processes still run, with their pidfds: the caller watches
  /// them and removes each client whose process exits while no session serves it.
  std::vector<std::pair<client_id, unique_fd>> take_adopted_processes();
  /// @brief From here on, journals are folded into snapshots on @p folds (a worker of their
  /// own, so that a fold waits for no other work, nor other work for a fold). Without it, a
  /// journal out of room is replaced by a whole snapshot written on the loop.
  void fold_on(background& folds) noexcept { folds_ = &folds; }
  /// @brief At a stop: no more folds, and one under way is replaced by a whole snapshot, so that
  /// the store holds one snapshot and its journal, as a daemon of an earlier version reads them.
  void stop_folding() noexcept;

  void keep_process(client_id client, int pidfd) override;
  void write_changes() noexcept override;

 private:
  /// The snapshot of @p generation and its journal, replayed; throws format_error.
  record_map read_generation(std::uint64_t generation);
  void adopt_image(books& state, const state_image& image);
  unique_fd take_passed(const std::string& name);
  /// A kept reservation from its record and its descriptors: every version's chunks, the
  /// notice page, the sleep copy. @throws std::runtime_error naming what was not kept.
  std::unique_ptr<versioned_reservation> adopt_reservation(const saved_reservation& saved,
                                                           object_id id,
                                                           const reservation_adopter& device);
  /// Stores the fds @p key needs now (none when not @p present) that are not stored yet, and
  /// adds to @p removed the names it needs no more.
  void keep_descriptors(const record_key& key, bool present, std::vector<std::string>& removed);
  /// Puts the records of @p changes as they are now into @p into, and the counters' record,
  /// storing and listing the fds they need.
  void collect(const change_set& changes, batch_builder& into, std::vector<std::string>& removed);
  /// Appends @p batch to the journal, or writes a whole snapshot where one is due or the journal
  /// has no room for it.
  void append_or_write_snapshot(std::span<const std::byte> batch);
  /// Writes a whole snapshot of the books, superseding a fold under way.
  void write_snapshot();
  /// A snapshot and its journal being folded into the next generation's snapshot.
  struct fold_job;
  bool fold_due() const noexcept;
  /// Goes on in the next generation's journal (stored, not yet waited for) and has the fold
  /// made on folds_.
  void start_fold();
  /// On the loop, once @p job is made: its snapshot replaces the generation it was made from.
  void finish_fold(fold_job& job, std::exception_ptr failure) noexcept;
  /// Removes the stored snapshots and journals of generations before @p generation.
  void remove_state_files_before(std::uint64_t generation);
  void store_fd(const std::string& name, int fd);
  void remove_fd(const std::string& name);
  /// Waits until systemd has taken every fd sent so far (BARRIER=1).
  void wait_for_store();

  bool active_;
  books* books_ = nullptr;
  background* folds_ = nullptr;
  /// The generation of the newest snapshot stored, and that snapshot (what a fold reads).
  std::uint64_t generation_ = 0;
  unique_fd snapshot_;
  /// The journal batches are appended to: generation_'s, or the next one's while a fold of
  /// generation_ is under way.
  std::uint64_t journal_generation_ = 0;
  journal_file journal_;
  /// The newest generation a state file was passed or stored with: a new one is past it.
  std::uint64_t newest_generation_ = 0;
  /// The last batch written: its room is reused by the next, which then allocates nothing.
  std::vector<std::byte> batch_buffer_;
  /// The changes write_changes() takes from the ledger, whose lists' room goes back to it.
  change_set changes_taken_;
  /// Where the whole batches of the journal read back at start end: appends go on from there.
  std::uint64_t adopted_journal_end_ = 0;
  std::uint64_t snapshot_size_ = 0;
  /// A write or a fold failed, or the journal read back ends in a torn batch or could not be
  /// taken on: the next write is a whole snapshot.
  bool snapshot_due_ = false;
  bool failing_ = false;  ///< the last write failed
  std::uint64_t failed_writes_ = 0;
  bool adopted_ = false;  ///< adopt() read a state back whole
  std::map<std::string, unique_fd> passed_;
  std::set<std::string> stored_;  ///< names systemd keeps for this service
  std::map<record_key, std::vector<std::string>> names_by_key_;
  std::map<client_id, unique_fd> processes_;  ///< each client's pidfd, a dup of the session's
  std::vector<std::pair<client_id, unique_fd>> adopted_processes_;
  std::vector<client_id> dead_clients_;
  /// Living clients whose connection only streamed events (client_row::streams_events).
  std::vector<client_id> ended_streams_;
};

}  // namespace gpumem::daemon::restart
