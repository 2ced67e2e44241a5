#include "restart/state_store.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <system_error>
#include <utility>

#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/os/pidfd.hpp"
#include "memory/host_reservation.hpp"
#include "memory/pool_factory.hpp"
#include "request_error.hpp"
#include "restart/record_codec.hpp"
#include "systemd/notify.hpp"

namespace gpumem::daemon::restart {

namespace {

/// The journal is folded into a new snapshot once it is larger than the snapshot and this.
/// Beside the fold made on its worker, the loop pays a new journal and a round trip to systemd
/// (the store's barrier) in the request that starts it, 0.1-0.3 ms on the development VM, and a
/// round trip when it ends, 0.06-0.14 ms. When a snapshot was written whole there, at 64 KiB one
/// fell every ~220 small requests, 0.6 us a request on average and the p99 of a client's round
/// trip; at 256 KiB a fold comes every ~900. A restart replays at most twice this much journal
/// (while a fold is under way) and one batch more beside a small snapshot (a large one raises
/// the limit to its own size); 256 KiB of journal replays in 0.2 ms.
constexpr std::uint64_t kMinimumJournalBytes = 256 << 10;

std::uint64_t fold_at(std::uint64_t snapshot_size) {
  return std::max(kMinimumJournalBytes, snapshot_size);
}

/// Room for the batches up to the fold, as many again while the fold is made on its worker, and
/// one more of up to kMinimumJournalBytes: a batch that finds no room is written as a whole
/// snapshot instead. The room is the file's size, not its memory, which is taken as the journal
/// fills (journal_file).
std::uint64_t journal_room(std::uint64_t snapshot_size) {
  return 2 * fold_at(snapshot_size) + kMinimumJournalBytes;
}
/// How long a write waits for systemd to take the fds it stored.
constexpr auto kStoreTimeout = std::chrono::seconds(5);

constexpr std::string_view kSnapshotPrefix = "state.";
constexpr std::string_view kJournalPrefix = "journal.";

std::string snapshot_name(std::uint64_t generation) {
  return std::string(kSnapshotPrefix) + std::to_string(generation);
}
std::string journal_name(std::uint64_t generation) {
  return std::string(kJournalPrefix) + std::to_string(generation);
}

/// The generation N in "<prefix>N", nullopt for any other name.
std::optional<std::uint64_t> generation_in(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  std::uint64_t generation = 0;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  const auto [end, error] = std::from_chars(first, last, generation);
  if (error != std::errc{} || end != last) return std::nullopt;
  return generation;
}

/// Puts the record of @p key as @p state holds it now into @p into (its erasure where it is
/// gone). @return whether it is there.
bool put_record(batch_builder& into, const books& state, record_key key) {
  const bool present = encode(state, key, into.begin_record(key));
  into.end_record(present);
  return present;
}

/// Calls @p visit with the key of every changed record, without making a list of them first.
template <class Visit>
void for_each_key(const change_set& changes, Visit&& visit) {
  for (const auto id : changes.clients) visit(record_key{record_type::client, id});
  for (const auto id : changes.pools) visit(record_key{record_type::pool, id});
  for (const auto id : changes.pages) visit(record_key{record_type::page, id});
  for (const auto id : changes.objects) visit(record_key{record_type::object, id});
}

}  // namespace

struct state_store::fold_job {
  unique_fd snapshot;  ///< of generation
  std::uint64_t generation = 0;
  journal_file journal;  ///< of generation, appended to no more
  snapshot_file folded;  ///< of generation + 1, once made
};

state_store::state_store(std::vector<systemd::passed_fd> passed)
    : active_(systemd::notify_socket_set()) {
  for (systemd::passed_fd& each : passed) {
    for (const std::string_view prefix : {kSnapshotPrefix, kJournalPrefix}) {
      if (const auto generation = generation_in(each.name, prefix)) {
        newest_generation_ = std::max(newest_generation_, *generation);
      }
    }
    stored_.insert(each.name);
    passed_.insert_or_assign(std::move(each.name), std::move(each.fd));
  }
}

unique_fd state_store::take_passed(const std::string& name) {
  const auto found = passed_.find(name);
  if (found == passed_.end()) return {};
  unique_fd fd = std::move(found->second);
  passed_.erase(found);
  return fd;
}

record_map state_store::read_generation(std::uint64_t generation) {
  record_map records;
  journal_generation_ = generation;
  const os::mapping snapshot = map_state_file(passed_.at(snapshot_name(generation)).get());
  replay(mapped_bytes(snapshot), file_kind::snapshot, generation, records);
  snapshot_size_ = snapshot.size();
  snapshot_due_ = true;  // without a journal, the state goes on in a new snapshot
  for (std::uint64_t journal = generation;; ++journal) {
    const auto found = passed_.find(journal_name(journal));
    if (found == passed_.end()) break;
    const os::mapping mapped = map_state_file(found->second.get());
    const replay_result replayed =
        replay(mapped_bytes(mapped), file_kind::journal, journal, records);
    if (replayed.whole_batches_after > 0) {
      spdlog::error(
          "state {}: journal {} has a damaged batch (its checksum does not match) with {} whole "
          "batch(es) after it, ignored with it: the state before it is used, and what those "
          "batches recorded is lost",
          generation, journal, replayed.whole_batches_after);
    } else if (replayed.torn_tail) {
      spdlog::warn(
          "state {}: journal {} ends in a batch cut short (a crash while writing it): "
          "the state before it is used",
          generation, journal);
    }
    journal_generation_ = journal;
    snapshot_due_ = replayed.torn_tail;
    adopted_journal_end_ = replayed.end;
    // The next generation's journal took the batches after this one's only where the daemon
    // stopped with a fold of this one under way: this one ends whole, and no snapshot of the
    // next generation was stored (one written whole on the loop has a journal of its own).
    if (replayed.torn_tail || passed_.contains(snapshot_name(journal + 1))) break;
  }
  return records;
}

void state_store::adopt(books& state) {
  std::vector<std::uint64_t> generations;
  for (const auto& [name, fd] : passed_) {
    if (const auto generation = generation_in(name, kSnapshotPrefix)) {
      generations.push_back(*generation);
    }
  }
  if (generations.empty()) {
    if (!passed_.empty()) {
      spdlog::warn("systemd passed {} descriptor(s) but no state snapshot: starting clean",
                   passed_.size());
    }
    return;
  }
  std::sort(generations.rbegin(), generations.rend());
  for (const std::uint64_t generation : generations) {
    try {
      const state_image image = decode(read_generation(generation));
      generation_ = generation;
      adopt_image(state, image);
      snapshot_ = take_passed(snapshot_name(generation));
      adopted_ = true;
      return;
    } catch (const format_error& error) {
      spdlog::error("state snapshot {} is unreadable ({}): trying an older one", generation,
                    error.what());
    }
  }
  throw format_error("no state snapshot passed by systemd is readable");
}

std::unique_ptr<versioned_reservation> state_store::adopt_reservation(
    const saved_reservation& saved, object_id id, const reservation_adopter& device) {
  if (saved.device != proto::kHostDevice && !device) {
    throw std::runtime_error("reservations on a GPU need CUDA");
  }
  const auto chunks_of =
      [&](const saved_reservation::version_chunks& ids) -> std::unique_ptr<reservation> {
    std::vector<adopted_chunk> chunks;
    for (const std::uint64_t chunk : ids.chunks) {
      unique_fd fd = take_passed(chunk_fd_name(chunk));
      if (!fd) throw std::runtime_error("chunk " + std::to_string(chunk) + " was not kept");
      chunks.push_back({chunk, std::move(fd)});
    }
    if (saved.device == proto::kHostDevice) {
      return std::make_unique<host_reservation>(saved.max_size, std::move(chunks));
    }
    return device(saved.device, saved.max_size, saved.chunk_size, std::move(chunks));
  };
  versioned_reservation::saved state;
  state.version = saved.current.version;
  state.committed = saved.committed;
  if (saved.state == saved_reservation::phase::awake) state.current = chunks_of(saved.current);
  for (const auto& older : saved.older) state.older.push_back({older.version, chunks_of(older)});
  if (saved.draft) {
    state.draft = chunks_of(*saved.draft);
    state.draft_writer = saved.draft_writer;
  }
  state.mapped = saved.mapped;
  state.writers.insert(saved.writers.begin(), saved.writers.end());
  state.attempt = saved.attempt;
  if (saved.sleep_copy) {
    unique_fd copy = take_passed(sleep_copy_fd_name(id, *saved.sleep_copy));
    if (!copy) throw std::runtime_error("its sleep copy was not kept");
    state.host_copy = sleep_copy::adopt(std::move(copy), *saved.sleep_copy);
  }
  state.asleep = saved.state == saved_reservation::phase::asleep;
  state.lost = saved.state == saved_reservation::phase::lost;
  const auto kept_notice = [&] {
    unique_fd kept = take_passed(notice_fd_name(id));
    if (!kept) throw std::runtime_error("its notice page was not kept");
    return notice_page(std::move(kept));
  };
  // A record of the first format has no notice page: its holders fetch the new one on reopen.
  return std::make_unique<versioned_reservation>(saved.device, saved.max_size, saved.chunk_size,
                                                 std::move(state),
                                                 saved.notice_kept ? kept_notice() : notice_page());
}

void state_store::adopt_image(books& state, const state_image& image) {
  // Clients resume their sessions only with the daemon they began them with.
  state.instance = image.meta.instance;
  state.events.continue_after(image.meta.event_sequence);
  std::size_t lost = 0;
  const auto drop = [&](std::string_view what, auto id, const std::string& why) {
    spdlog::error("{} {} from before the restart is lost: {}", what, id, why);
    ++lost;
  };
  for (const auto& [id, client] : image.clients) state.rows.restore_client(id, client.row);
  for (const auto& [id, saved] : image.pools) {
    unique_fd fd = take_passed(pool_fd_name(id));
    if (!fd) {
      drop("pool instance", id, "systemd kept no descriptor of it");
      continue;
    }
    try {
      state.memory.adopt_pool(adopt_pool(id, saved.config, std::move(fd)), saved.tenant);
    } catch (const std::exception& error) {
      drop("pool instance", id, error.what());
    }
  }
  const signal_page_adopter adopt_signal_page = make_signal_page_adopter();
  for (const auto& [id, saved] : image.pages) {
    unique_fd fd = take_passed(page_fd_name(id));
    if (!fd) {
      drop("lock page", id, "systemd kept no descriptor of it");
      continue;
    }
    try {
      auto page = std::make_unique<sync_page>(id, saved.tenant, std::move(fd));
      for (const std::int32_t device : saved.signal_devices) {
        unique_fd signal = take_passed(signal_fd_name(id, device));
        if (!signal || !adopt_signal_page) {
          throw std::runtime_error("its signal page on device " + std::to_string(device) +
                                   (signal ? " needs CUDA" : " was not kept"));
        }
        page->adopt_signal_page(device, adopt_signal_page(device, std::move(signal)));
      }
      state.sync.adopt_page(std::move(page));
    } catch (const std::exception& error) {
      drop("lock page", id, error.what());
    }
  }
  const reservation_adopter adopt_device_reservation = make_reservation_adopter();
  for (const auto& [id, saved] : image.objects) {
    try {
      std::unique_ptr<versioned_reservation> reserved;
      if (saved.reservation) {
        reserved = adopt_reservation(*saved.reservation, id, adopt_device_reservation);
      }
      state.rows.restore_object(id, saved.row);
      try {
        if (saved.allocation) {
          state.memory.adopt_allocation(id, saved.allocation->pool, saved.allocation->where,
                                        saved.allocation->grant);
        } else if (reserved) {
          state.reservations.adopt(id, std::move(reserved));
        } else if (saved.cell) {
          state.sync.adopt_cell(id, *saved.cell);
        }
      } catch (...) {
        state.rows.erase(id);
        throw;
      }
    } catch (const std::exception& error) {
      drop(kind_name(saved.row.kind), id, error.what());
    }
  }
  for (const auto& [id, client] : image.clients) {
    if (!client.attachment) continue;
    try {
      state.sync.adopt_attachment(id, *client.attachment);
    } catch (const std::exception& error) {
      drop("lock slot of client", id, error.what());
    }
  }
  for (const auto& pending : image.meta.pending) state.sync.adopt_pending(pending);
  state.rows.restore_next_ids(image.meta.next_object, image.meta.next_client);
  state.memory.reserve_pool_ids(image.meta.next_pool);
  chunk_ids_from(image.meta.next_chunk);
  for (const auto& [id, client] : image.clients) {
    unique_fd pidfd = take_passed(client_fd_name(id));
    if (pidfd && !os::process_exited(pidfd.get())) {
      if (client.row.streams_events && !client.attachment && state.rows.client(id).holds.empty()) {
        ended_streams_.push_back(id);
        continue;
      }
      processes_.emplace(id, unique_fd(::fcntl(pidfd.get(), F_DUPFD_CLOEXEC, 3)));
      adopted_processes_.emplace_back(id, std::move(pidfd));
    } else {
      dead_clients_.push_back(id);
    }
  }
  spdlog::info(
      "re-adopted state {} of gpumemd instance {:016x}: {} client(s) ({} alive), {} object(s), "
      "{} pool instance(s), {} lock page(s); {} lost",
      generation_, state.instance, image.clients.size(), adopted_processes_.size(),
      state.rows.objects().size(), image.pools.size(), image.pages.size(), lost);
}

std::vector<std::pair<client_id, unique_fd>> state_store::take_adopted_processes() {
  return std::exchange(adopted_processes_, {});
}

void state_store::start(books& state, bool readopted) {
  if (!active_) return;
  books_ = &state;
  // From here on, what changes is written down.
  state.rows.track_changes();
  // Once changes are written down (it may find a cell corrupt), and before the clients that
  // died meanwhile are let go: their turns go to the pages then, and no turn is given twice.
  if (readopted && adopted_) state.sync.resume_dead_turns();
  for (const client_id dead : dead_clients_) {
    spdlog::info("client {} exited while no gpumemd ran: what it held is let go", dead);
    // As a death while the daemon runs: counted, told as died and reclaimed events.
    state.depart(dead, true);
  }
  for (const client_id stream : ended_streams_) {
    spdlog::info("client {} only streamed events, which ended with the daemon before: it goes",
                 stream);
    state.depart(stream, false);
  }
  if (!dead_clients_.empty() || !ended_streams_.empty()) {
    state.readopted_clients = state.rows.clients().size();
  }
  dead_clients_.clear();
  ended_streams_.clear();
  // Objects that no client holds any more go, as they would have if the daemon had lived.
  std::vector<object_id> unheld;
  for (const auto& [id, row] : state.rows.objects()) {
    if (row.holders.empty()) unheld.push_back(id);
  }
  for (const object_id id : unheld) {
    const object_row row = *state.rows.find(id);
    if (family_of(row.kind) == object_family::sync) {
      state.sync.let_go(id, row, 0);
    } else {
      state.memory.let_go(id, row);
    }
  }
  // As books::write_changes() does: what the state written down calls free is zeroed.
  state.memory.settle_frees();
  // What the daemon before called free need not be: a range it could not punch (host_pool) is
  // free in its records with its bytes still there. Every adopted memfd's free space is
  // punched before anything is placed.
  if (readopted && adopted_) state.memory.zero_free_space();
  // What systemd passed that nothing adopted goes before anything is stored: in a store that a
  // previous gpumemd filled, systemd would drop what is stored next, the new snapshot among it.
  // The state files stay until the new snapshot replaces them.
  for (auto each = passed_.begin(); each != passed_.end();) {
    if (generation_in(each->first, kSnapshotPrefix) || generation_in(each->first, kJournalPrefix)) {
      ++each;
      continue;
    }
    remove_fd(each->first);
    each = passed_.erase(each);
  }
  // Every descriptor in the store: those passed back are there, the pool instances made at
  // start are stored now. Pools and pages are few: all are written again.
  std::vector<std::string> removed;
  for (const auto& [id, row] : state.rows.clients()) {
    keep_descriptors({record_type::client, id}, true, removed);
  }
  for (const auto& [id, row] : state.rows.objects()) {
    keep_descriptors({record_type::object, id}, true, removed);
  }
  for (std::uint32_t id = 0; id < state.memory.pool_id_limit(); ++id) state.rows.touch_pool(id);
  for (const std::uint32_t id : state.sync.page_ids()) state.rows.touch_page(id);
  batch_builder changed;
  change_set changes;
  state.rows.take_changes(changes);
  collect(changes, changed, removed);
  const std::vector<std::byte> batch = std::move(changed).take();
  wait_for_store();
  unique_fd journal = take_passed(journal_name(journal_generation_));
  // A daemon stopped with a fold under way left two journals, and one may have left a newer
  // generation that could not be read: rather than go on with the state files as they are, a
  // whole snapshot of a generation past all of them replaces them, before any client is served.
  if (readopted && adopted_ && journal && !snapshot_due_ && journal_generation_ == generation_ &&
      newest_generation_ == generation_) {
    // The state read back goes on in its own journal: what changed since (clients that died
    // while no daemon ran, new pool instances) is one more batch, and nothing is rewritten
    // before the first client is served.
    try {
      journal_ = journal_file::adopt(std::move(journal), adopted_journal_end_,
                                     journal_room(snapshot_size_));
    } catch (const std::system_error& error) {
      // No room for it (memory): the state goes on in a new snapshot and journal instead.
      spdlog::warn("the journal read back cannot be appended to ({}): writing a new snapshot",
                   error.what());
      snapshot_due_ = true;
    }
    append_or_write_snapshot(batch);
  } else {
    write_snapshot();
  }
  // What systemd passed that no record refers to: a previous daemon's leftovers.
  std::set<std::string> wanted = {snapshot_name(generation_), journal_name(generation_)};
  for (const auto& [key, names] : names_by_key_) wanted.insert(names.begin(), names.end());
  for (const std::string& name : std::set<std::string>(stored_)) {
    if (!wanted.contains(name)) remove_fd(name);
  }
  passed_.clear();
  state.set_keeper(this);
  spdlog::info("state kept in systemd's fd store: {} descriptor(s), snapshot {}", stored_.size(),
               generation_);
}

void state_store::keep_process(client_id client, int pidfd) {
  unique_fd kept(::fcntl(pidfd, F_DUPFD_CLOEXEC, 3));
  if (kept) processes_.insert_or_assign(client, std::move(kept));
}

void state_store::keep_descriptors(const record_key& key, bool present,
                                   std::vector<std::string>& removed) {
  // A client's one descriptor, its pidfd, is stored once under a name made from its id, which
  // stays while the client does: a change of its row (every request whose reply is kept)
  // needs no name made and looked up again.
  if (present && key.type == record_type::client && names_by_key_.contains(key)) return;
  std::vector<std::pair<std::string, int>> wanted;
  if (present && key.type == record_type::client) {
    if (const auto process = processes_.find(key.id); process != processes_.end()) {
      wanted.emplace_back(client_fd_name(key.id), process->second.get());
    }
  } else if (present) {
    wanted = descriptors_of(*books_, key);
  }
  std::vector<std::string> now;
  for (const auto& [name, fd] : wanted) {
    if (!stored_.contains(name)) store_fd(name, fd);
    now.push_back(name);
  }
  // Looked up, not inserted: most records (allocations, a client's counts) hold no descriptor,
  // and an entry made and erased again for each cost every such change two allocations.
  const auto had = names_by_key_.find(key);
  if (had != names_by_key_.end()) {
    for (const std::string& name : had->second) {
      if (std::find(now.begin(), now.end(), name) == now.end()) removed.push_back(name);
    }
  }
  if (now.empty()) {
    if (had != names_by_key_.end()) names_by_key_.erase(had);
  } else if (had != names_by_key_.end()) {
    had->second = std::move(now);
  } else {
    names_by_key_.emplace(key, std::move(now));
  }
  if (!present && key.type == record_type::client) processes_.erase(key.id);
}

void state_store::collect(const change_set& changes, batch_builder& into,
                          std::vector<std::string>& removed) {
  for_each_key(changes, [&](record_key key) {
    keep_descriptors(key, put_record(into, *books_, key), removed);
  });
  put_record(into, *books_, {record_type::meta, 0});
}

void state_store::write_changes() noexcept {
  change_set& changes = changes_taken_;
  books_->rows.take_changes(changes);
  try {
    std::vector<std::string> removed;
    const std::size_t stored_before = stored_.size();
    batch_builder changed(std::move(batch_buffer_));
    collect(changes, changed, removed);
    batch_buffer_ = std::move(changed).take();
    // The next generation's journal is stored with this batch's descriptors, under one barrier.
    if (fold_due()) start_fold();
    if (stored_.size() > stored_before) wait_for_store();
    append_or_write_snapshot(batch_buffer_);
    for (const std::string& name : removed) remove_fd(name);
    if (std::exchange(failing_, false)) {
      spdlog::warn("the state is written down for a restart again, after {} failed write(s)",
                   failed_writes_);
    }
  } catch (const std::exception& error) {
    // The daemon goes on serving, and says that its state is not kept (status, metrics) until
    // a write succeeds. What changed is written with the next change, in a whole snapshot: a
    // batch written in part ends the journal for its readers.
    snapshot_due_ = true;
    failing_ = true;
    ++failed_writes_;
    for (const auto id : changes.objects) books_->rows.touch(id);
    for (const auto id : changes.clients) books_->rows.touch_client(id);
    for (const auto id : changes.pools) books_->rows.touch_pool(id);
    for (const auto id : changes.pages) books_->rows.touch_page(id);
    spdlog::error(
        "writing the state down for a restart failed (tried again with the next "
        "change): {}",
        error.what());
  }
}

void state_store::append_or_write_snapshot(std::span<const std::byte> batch) {
  if (snapshot_due_ || !journal_.append(batch)) write_snapshot();
}

void state_store::write_snapshot() {
  // Each record put as its key is found: with 10,000 objects a list of the keys first was a
  // tenth to a fifth of the snapshot, which holds up the request that needs it.
  batch_builder records;
  const auto put = [&](record_key key) { put_record(records, *books_, key); };
  put({record_type::meta, 0});
  for (const auto& [id, row] : books_->rows.clients()) put({record_type::client, id});
  for (std::uint32_t id = 0; id < books_->memory.pool_id_limit(); ++id) {
    if (books_->memory.pool_by_id(id) != nullptr) put({record_type::pool, id});
  }
  for (const std::uint32_t id : books_->sync.page_ids()) put({record_type::page, id});
  for (const auto& [id, row] : books_->rows.objects()) put({record_type::object, id});

  // A generation no state file had: past the journal of a fold under way (which is dropped when
  // it comes back, finish_fold), and past a name this call stored before it failed.
  const std::uint64_t generation = ++newest_generation_;
  snapshot_file snapshot = seal_snapshot(generation, std::move(records).take());
  journal_file journal = journal_file::create(generation, journal_room(snapshot.size));
  store_fd(journal_name(generation), journal.fd());
  store_fd(snapshot_name(generation), snapshot.fd.get());
  wait_for_store();
  // Only now may the older generations go: until the new one is stored, they are the state.
  remove_state_files_before(generation);
  generation_ = journal_generation_ = generation;
  snapshot_ = std::move(snapshot.fd);
  snapshot_size_ = snapshot.size;
  journal_ = std::move(journal);
  snapshot_due_ = false;
}

bool state_store::fold_due() const noexcept {
  // Half the room at most: a journal made beside a smaller snapshot keeps room for the batches
  // that come while its own fold is made.
  return folds_ != nullptr && !snapshot_due_ && journal_generation_ == generation_ &&
         journal_.size() > std::min(fold_at(snapshot_size_), journal_.room() / 2);
}

void state_store::start_fold() {
  auto job = std::make_shared<fold_job>();
  job->snapshot = unique_fd(::fcntl(snapshot_.get(), F_DUPFD_CLOEXEC, 3));
  if (!job->snapshot) {
    throw std::system_error(errno, std::system_category(), "duplicating the state snapshot");
  }
  job->generation = generation_;
  const std::uint64_t next = generation_ + 1;
  journal_file journal = journal_file::create(next, journal_room(snapshot_size_));
  newest_generation_ = next;
  store_fd(journal_name(next), journal.fd());
  job->journal = std::exchange(journal_, std::move(journal));
  journal_generation_ = next;
  folds_->run(
      [job] {
        job->folded = fold_snapshot(job->snapshot.get(), job->generation, job->journal.written());
      },
      [this, job](std::exception_ptr failure) { finish_fold(*job, failure); });
}

void state_store::finish_fold(fold_job& job, std::exception_ptr failure) noexcept {
  // A whole snapshot written meanwhile took the state past this fold.
  if (generation_ != job.generation || journal_generation_ != job.generation + 1) return;
  const std::uint64_t folded = job.generation + 1;
  try {
    if (failure) std::rethrow_exception(failure);
    store_fd(snapshot_name(folded), job.folded.fd.get());
    wait_for_store();
    remove_state_files_before(folded);
    generation_ = folded;
    snapshot_ = std::move(job.folded.fd);
    snapshot_size_ = job.folded.size;
  } catch (const std::exception& error) {
    // Snapshot and both journals still hold the state; the next change replaces them.
    snapshot_due_ = true;
    spdlog::error(
        "folding state {} into snapshot {} failed ({}): the next change writes a "
        "whole snapshot",
        job.generation, folded, error.what());
  }
}

void state_store::stop_folding() noexcept {
  folds_ = nullptr;
  if (books_ == nullptr || journal_generation_ == generation_) return;
  try {
    write_snapshot();
  } catch (const std::exception& error) {
    spdlog::error(
        "writing the state down whole at the stop failed ({}): the next gpumemd reads "
        "the snapshot and both journals",
        error.what());
  }
}

void state_store::remove_state_files_before(std::uint64_t generation) {
  std::vector<std::string> older;
  for (const std::string_view prefix : {kSnapshotPrefix, kJournalPrefix}) {
    // The names of one prefix are neighbours in the ordered set.
    for (auto each = stored_.lower_bound(std::string(prefix));
         each != stored_.end() && each->starts_with(prefix); ++each) {
      if (const auto found = generation_in(*each, prefix); found && *found < generation) {
        older.push_back(*each);
      }
    }
  }
  for (const std::string& name : older) remove_fd(name);
}

void state_store::store_fd(const std::string& name, int fd) {
  const int fds[] = {fd};
  if (const std::error_code error =
          systemd::notify_with_fds("FDSTORE=1\nFDNAME=" + name, std::span<const int>(fds));
      error) {
    throw std::system_error(error, "storing " + name + " in systemd's fd store");
  }
  stored_.insert(name);
}

void state_store::remove_fd(const std::string& name) {
  if (stored_.erase(name) == 0) return;
  systemd::notify("FDSTOREREMOVE=1\nFDNAME=" + name);
}

void state_store::wait_for_store() {
  if (const std::error_code error = systemd::barrier(kStoreTimeout); error) {
    spdlog::warn("systemd did not confirm the fd store within {} s: {}",
                 std::chrono::duration_cast<std::chrono::seconds>(kStoreTimeout).count(),
                 error.message());
  }
}

}  // namespace gpumem::daemon::restart
