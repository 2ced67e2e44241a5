#include "memory/reservation_book.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "memory/host_reservation.hpp"
#include "memory/open_named.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;

namespace {

double milliseconds_between(std::chrono::steady_clock::time_point from,
                            std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

std::string what_failed(const std::exception_ptr& failure, errc& code) {
  try {
    std::rethrow_exception(failure);
  } catch (const request_error& error) {
    code = error.code();
    return error.what();
  } catch (const std::exception& error) {
    code = errc::internal;
    return error.what();
  }
}
}  // namespace

reservation_book::reservation_book(ledger& rows, const access_policy& access,
                                   const quota_policy& quotas, descriptor_budget& descriptors,
                                   reservation_maker make_device_reservation)
    : rows_(rows),
      access_(access),
      quotas_(quotas),
      descriptors_(descriptors),
      make_device_reservation_(std::move(make_device_reservation)) {}

std::unique_ptr<reservation> reservation_book::make(std::int32_t device, std::uint64_t max_size,
                                                    std::uint64_t chunk_size) const {
  if (device == proto::kHostDevice) return make_host_reservation(max_size);  // one chunk size
  if (!make_device_reservation_) {
    throw request_error(errc::not_supported,
                        fmt::format("reservations on cuda:{} need the CUDA backend, unavailable "
                                    "here (device -1, the host, is)",
                                    device));
  }
  return make_device_reservation_(device, max_size, chunk_size);
}

proto::reservation_reply reservation_book::grant(object_id id, const versioned_reservation& entry,
                                                 proto::access_mode access) const {
  proto::reservation_reply reply{};
  reply.reservation_id = id;
  reply.max_size = entry.max_size();
  reply.committed = entry.committed();
  reply.chunk_size = entry.chunk_size();
  reply.device = entry.device();
  reply.access = access;
  reply.version = entry.version();
  return reply;
}

versioned_reservation& reservation_book::held(client_id client, object_id id, bool owner_only,
                                              const char* what) {
  const object_row& row = rows_.held(client, id, object_family::reservation);
  if (owner_only && row.owner != client) {
    throw request_error(errc::permission_denied,
                        fmt::format("only the owner may {} reservation {}", what, id));
  }
  return *entries_.at(id);
}

proto::reservation_reply reservation_book::reserve(client_id client,
                                                   const proto::reserve_request& request) {
  std::string name(request.name.view());
  if (!name.empty() && rows_.find_name(object_family::reservation, name)) {
    throw request_error(errc::already_exists,
                        fmt::format("a reservation named '{}' already exists", name));
  }
  // Charged for whole chunks, which a large reservation's are: 64 MiB for 16 GiB.
  std::unique_ptr<reservation> first = make(request.device, request.max_size);
  const std::uint64_t chunks = whole_chunks(request.initial_size, first->chunk_size());
  quotas_.check(rows_, client, charge::memory(request.device, chunks * first->chunk_size()));
  // Its chunks and its notice page.
  descriptors_.check(chunks + 1, name.empty() ? std::string("a new reservation")
                                              : fmt::format("reservation '{}'", name));
  first->resize(chunks);
  auto entry = std::make_shared<versioned_reservation>(std::move(first), notice_page());
  const object_id id =
      rows_.add(client, {object_kind::reservation, std::move(name), entry->committed(),
                         request.device, access_.mode_for(request.flags)});
  try {
    entries_.emplace(id, entry);
    entry->add_writer(client);
    return grant(id, *entry, proto::access_mode::read_write);
  } catch (...) {
    entries_.erase(id);
    rows_.erase(id);
    throw;
  }
}

proto::reservation_reply reservation_book::open(client_id client,
                                                const proto::open_request& request) {
  const object_id id = open_named(rows_, access_, client, object_family::reservation, request);
  versioned_reservation& entry = *entries_.at(id);
  if (entry.current_phase() == versioned_reservation::phase::lost) {
    release(client, id);
    throw request_error(errc::not_found,
                        fmt::format("reservation '{}' was lost: its owner let go of it while it "
                                    "slept",
                                    request.name.view()));
  }
  if (request.access == proto::access_mode::read_write) {
    entry.add_writer(client);
    rows_.touch(id);
  }
  return grant(id, entry, request.access);
}

int reservation_book::notice_fd(object_id id) const {
  return entries_.at(id)->notice().read_only_fd();
}

proto::reservation_reply reservation_book::resize(client_id client,
                                                  const proto::resize_request& request) {
  versioned_reservation& entry = held(client, request.reservation_id, true, "resize");
  reservation& backing = entry.resizable();
  if (request.committed > backing.max_size()) {
    throw request_error(errc::invalid_argument,
                        fmt::format("{} bytes exceed reservation {}'s {}", request.committed,
                                    request.reservation_id, backing.max_size()));
  }
  const std::uint64_t chunks = whole_chunks(request.committed, backing.chunk_size());
  if (chunks * backing.chunk_size() > backing.committed()) {
    quotas_.check(
        rows_, client,
        charge::memory(backing.device(), chunks * backing.chunk_size() - backing.committed(), 0));
    descriptors_.check(chunks - backing.chunk_count(),
                       name_object(request.reservation_id, *rows_.find(request.reservation_id)));
  }
  backing.resize(chunks);
  entry.resized();
  recharge(request.reservation_id);
  return grant(request.reservation_id, entry, proto::access_mode::read_write);
}

proto::chunks_reply reservation_book::chunks(client_id client, const proto::chunks_request& request,
                                             std::vector<int>& fds) {
  const object_id id = request.reservation_id;
  versioned_reservation& entry = held(client, id, false, "map");
  if (entry.current_phase() == versioned_reservation::phase::lost) {
    throw request_error(errc::not_found,
                        fmt::format("reservation {} was lost: its owner let go of it while it "
                                    "slept",
                                    id));
  }
  const bool draft = request.which == proto::chunk_set::draft;
  const reservation* backing = nullptr;
  std::uint64_t version = entry.version();
  if (draft) {
    version = request.version != 0 ? request.version : entry.draft_version();
    backing = entry.draft(client, version);
  } else {
    if (request.first != 0 && request.version != entry.version()) {
      throw request_error(errc::wrong_state,
                          fmt::format("reservation {} is at version {} now, not {}: ask again "
                                      "from its first chunk",
                                      id, entry.version(), request.version));
    }
    backing = entry.current();
    rows_.touch(id);
    if (request.first == 0) {
      entry.maps_current(client);
      recharge(id);  // the version it mapped before may be free now
    }
  }
  proto::chunks_reply reply;
  reply.head.version = version;
  reply.head.state = entry.state();
  reply.head.generation = entry.notice().generation();
  if (backing == nullptr) {  // asleep or going to sleep: the holder maps nothing from now on
    copy_out_when_ready(id);
    return reply;
  }
  // Only a writer of version 1 gets chunks it can map writable; later versions never change.
  const bool writable = draft || (entry.version() == 1 && entry.may_write(client));
  reply.head.committed_chunks = backing->chunk_count();
  for (std::size_t index = request.first; index < backing->chunk_count(); ++index) {
    if (reply.records.size() == proto::kMaxFdsPerMessage) {
      reply.head.more = 1;
      break;
    }
    const reservation::chunk each = backing->chunk_at(index);
    reply.records.push_back({each.id, index});
    fds.push_back(writable ? each.fd : each.read_only_fd);
  }
  reply.head.count = static_cast<std::uint32_t>(reply.records.size());
  return reply;
}

void reservation_book::quiesce(client_id client, object_id id) {
  held(client, id, false, "quiesce").maps_nothing(client);
  recharge(id);
  rows_.touch(id);
  copy_out_when_ready(id);
}

void reservation_book::release(client_id client, object_id id) {
  const object_row& row = rows_.held(client, id, object_family::reservation);
  if (rows_.drop_reference(id, client)) let_go(id, row);
}

proto::reservation_reply reservation_book::begin_version(
    client_id client, const proto::begin_version_request& request) {
  versioned_reservation& entry = held(client, request.reservation_id, true, "write a version of");
  if (request.size > entry.max_size()) {
    throw request_error(errc::invalid_argument,
                        fmt::format("{} bytes exceed reservation {}'s {}", request.size,
                                    request.reservation_id, entry.max_size()));
  }
  entry.check_draft_may_begin();  // before the quota, which counts an open draft already
  const std::uint64_t count = whole_chunks(request.size, entry.chunk_size());
  try {
    quotas_.check(rows_, client, charge::memory(entry.device(), count * entry.chunk_size(), 0));
  } catch (const request_error& refused) {
    // The quota's words are long, and the reply's text ends at 240 characters: this first.
    if (entry.retained_bytes() == 0) throw;
    throw request_error(refused.code(),
                        fmt::format("{} bytes in use are earlier versions readers still map; {}",
                                    entry.retained_bytes(), refused.what()),
                        refused.logged_only());
  }
  descriptors_.check(count,
                     name_object(request.reservation_id, *rows_.find(request.reservation_id)));
  std::unique_ptr<reservation> chunks = make(entry.device(), entry.max_size(), entry.chunk_size());
  chunks->resize(count);
  const std::uint64_t bytes = chunks->committed();
  const std::uint64_t version = entry.begin_draft(client, std::move(chunks));
  recharge(request.reservation_id);
  rows_.touch(request.reservation_id);
  proto::reservation_reply reply =
      grant(request.reservation_id, entry, proto::access_mode::read_write);
  reply.version = version;
  reply.committed = bytes;
  return reply;
}

proto::reservation_reply reservation_book::commit_version(client_id client,
                                                          const proto::version_request& request) {
  versioned_reservation& entry = held(client, request.reservation_id, true, "commit a version of");
  entry.commit_draft(client, request.version);
  recharge(request.reservation_id);
  rows_.touch(request.reservation_id);
  spdlog::info("reservation {}: version {} committed ({} bytes)", request.reservation_id,
               request.version, entry.committed());
  return grant(request.reservation_id, entry, proto::access_mode::read_only);
}

void reservation_book::abandon_version(client_id client, const proto::version_request& request) {
  held(client, request.reservation_id, true, "abandon a version of")
      .abandon_draft(client, request.version);
  recharge(request.reservation_id);
  rows_.touch(request.reservation_id);
}

std::pair<object_id, versioned_reservation*> reservation_book::targeted(
    client_id client, const proto::reservation_target& target) {
  object_id id = target.reservation_id;
  if (id == 0) {
    const auto found = rows_.find_name(object_family::reservation, target.name.view());
    if (!found) {
      throw request_error(errc::not_found,
                          fmt::format("no reservation named '{}'", target.name.view()));
    }
    id = *found;
  } else {
    rows_.held(client, id, object_family::reservation);
  }
  return {id, entries_.at(id).get()};
}

proto::reservation_status reservation_book::sleep(client_id client,
                                                  const proto::sleep_request& request) {
  const auto [id, entry] = targeted(client, request.target);
  access_.check_operate(rows_.client(client).who, id, *rows_.find(id), "put to sleep");
  const std::chrono::milliseconds deadline = request.deadline_ms == 0
                                                 ? kDefaultSleepDeadline
                                                 : std::chrono::milliseconds(request.deadline_ms);
  if (deadline > kLongestSleepDeadline) {
    throw request_error(errc::invalid_argument,
                        fmt::format("a sleep deadline of {} ms is longer than the {} ms allowed",
                                    deadline.count(), kLongestSleepDeadline.count()));
  }
  if (background_ == nullptr) {
    throw request_error(errc::not_supported, "this daemon has no worker for sleep and wake");
  }
  const std::string named = name_object(id, *rows_.find(id));
  const bool discard = (request.flags & proto::kSleepDiscard) != 0;
  entry->check_may_sleep(named);
  // Its copy is stored when the sleep ends, however long its holders take to let go, and before
  // its chunks are removed.
  if (!discard) descriptors_.check_coming(1, named);
  entry->begin_sleep(named, discard);
  note_under_way(id);
  rows_.touch(id);
  spdlog::info("reservation {}: going to sleep ({}), {} holder(s) to let go within {} ms", id,
               entry->discards() ? "discarding" : "copying", entry->holders_mapping().size(),
               deadline.count());
  const std::uint64_t attempt = entry->attempt();
  // By copy: clang before 16 cannot capture a structured binding by name.
  background_->after(deadline, [this, id = id, attempt] { deadline_passed(id, attempt); });
  copy_out_when_ready(id);
  return entry->status(id);
}

void reservation_book::deadline_passed(object_id id, std::uint64_t attempt) {
  const auto found = entries_.find(id);
  if (found == entries_.end()) return;
  versioned_reservation& entry = *found->second;
  if (entry.attempt() != attempt ||
      entry.current_phase() != versioned_reservation::phase::draining) {
    return;
  }
  std::string names;
  for (const client_id holder : entry.holders_mapping()) {
    names += (names.empty() ? "" : ", ") + describe_holder(holder);
  }
  entry.fail(errc::busy, fmt::format("reservation {} stays awake: {} did not let go in time "
                                     "(refresh() or quiesce() lets go)",
                                     id, names));
  rows_.touch(id);
  spdlog::warn("reservation {}: sleep failed, holder(s) {} did not let go", id, names);
}

std::string reservation_book::describe_holder(client_id holder) const {
  const auto found = rows_.clients().find(holder);
  if (found == rows_.clients().end()) return fmt::format("client {}", holder);
  return fmt::format("client {} ({})", holder,
                     access_policy::describe(found->second.who, found->second.label));
}

void reservation_book::copy_out_when_ready(object_id id) {
  const auto found = entries_.find(id);
  if (found == entries_.end() || !found->second->ready_to_copy_out()) return;
  std::shared_ptr<versioned_reservation> entry = found->second;
  const reservation* from = entry->begin_copy_out();
  rows_.touch(id);
  struct copy_out_job {
    std::optional<sleep_copy> copy;  ///< starts as the copy a wake kept, if any
    bool reused = false;
    double populate_ms = 0;
    double copy_ms = 0;
  };
  auto job = std::make_shared<copy_out_job>();
  if (from != nullptr) job->copy = entry->take_kept_copy();
  const std::uint64_t bytes = entry->committed();
  const std::uint64_t attempt = entry->attempt();
  background_->run(
      [from, job, bytes, attempt] {
        if (from == nullptr) return;  // discarding
        const auto started = std::chrono::steady_clock::now();
        job->reused = job->copy && job->copy->bytes == bytes;
        if (!job->reused) {
          job->copy.reset();  // another size: its pages go here, off the loop
          job->copy.emplace(sleep_copy::make(bytes, attempt));
        }
        const auto populated = std::chrono::steady_clock::now();
        from->copy_out(*job->copy);
        job->populate_ms = milliseconds_between(started, populated);
        job->copy_ms = milliseconds_between(populated, std::chrono::steady_clock::now());
      },
      [this, id, entry, job, bytes](std::exception_ptr failure) {
        if (!still_held(id, entry.get())) {  // released meanwhile: the copy has no one to serve
          let_go_off_loop(std::move(job->copy));
          return;
        }
        rows_.touch(id);
        if (failure) {
          errc code = errc::internal;
          const std::string why = what_failed(failure, code);
          entry->fail(
              code, fmt::format("reservation {} stays awake: copying it out failed: {}", id, why));
          spdlog::error("reservation {}: sleep failed: {}", id, why);
          let_go_off_loop(std::move(job->copy));
          return;
        }
        const auto freeing = std::chrono::steady_clock::now();
        entry->finish_sleep(std::move(job->copy));
        const double freeing_ms = milliseconds_between(freeing, std::chrono::steady_clock::now());
        if (entry->discards()) {
          spdlog::info("reservation {}: asleep, {} bytes dropped (chunks freed in {:.1f} ms)", id,
                       bytes, freeing_ms);
        } else {
          spdlog::info(
              "reservation {}: asleep, {} bytes copied to the host ({}, copied in {:.1f} ms, "
              "chunks freed in {:.1f} ms)",
              id, bytes,
              job->reused ? std::string("into the copy its last wake kept")
                          : fmt::format("host pages made in {:.1f} ms", job->populate_ms),
              job->copy_ms, freeing_ms);
        }
        lose_if_owner_left(id, *entry);
      });
}

proto::reservation_status reservation_book::wake(client_id client,
                                                 const proto::reservation_target& target) {
  const auto [id, entry] = targeted(client, target);
  access_.check_operate(rows_.client(client).who, id, *rows_.find(id), "wake");
  entry->check_may_wake(name_object(id, *rows_.find(id)));
  if (background_ == nullptr) {
    throw request_error(errc::not_supported, "this daemon has no worker for sleep and wake");
  }
  const std::uint64_t chunks = whole_chunks(entry->committed(), entry->chunk_size());
  descriptors_.check_coming(chunks, name_object(id, *rows_.find(id)));
  const auto making = std::chrono::steady_clock::now();
  std::unique_ptr<reservation> fresh =
      make(entry->device(), entry->max_size(), entry->chunk_size());
  fresh->resize(whole_chunks(entry->committed(), fresh->chunk_size()));
  const double making_ms = milliseconds_between(making, std::chrono::steady_clock::now());
  reservation& into = entry->begin_copy_in(std::move(fresh));
  rows_.touch(id);
  std::shared_ptr<versioned_reservation> kept = entries_.at(id);
  sleep_copy* from = entry->host_copy_to_wake_from();
  const bool sealed = entry->version() > 1;
  const auto started = std::chrono::steady_clock::now();
  note_under_way(id);  // its chunks are stored when the copy ends: counted until then
  background_->run(
      [&into, from, sealed] {
        if (from == nullptr) {
          into.clear();
        } else {
          into.copy_in(*from);
        }
        if (sealed) into.seal();
      },
      [this, id = id, kept, started, making_ms](std::exception_ptr failure) {
        if (!still_held(id, kept.get())) {  // released meanwhile: its bytes have no one to serve
          let_go_off_loop(kept->lose());
          let_go_off_loop(kept->take_kept_copy());
          return;
        }
        rows_.touch(id);
        if (failure) {
          errc code = errc::internal;
          const std::string why = what_failed(failure, code);
          kept->fail(code,
                     fmt::format("reservation {} stays asleep: waking it failed: {}", id, why));
          spdlog::error("reservation {}: wake failed: {}", id, why);
          lose_if_owner_left(id, *kept);
          return;
        }
        // A sleep that copied took the kept copy, so none is kept now unless this one came
        // back empty, from a discarding sleep: that kept copy stays for the next sleep.
        std::optional<sleep_copy> used = kept->finish_wake();
        const bool keep = used && sleep_memory_kept() + used->bytes <= keep_at_most_;
        spdlog::info(
            "reservation {}: awake in {:.1f} ms (its chunks made in {:.1f} ms before){}", id,
            milliseconds_between(started, std::chrono::steady_clock::now()), making_ms,
            keep ? fmt::format("; its {} host bytes kept for the next sleep", used->bytes) : "");
        if (keep) {
          kept->keep_copy(std::move(*used));
        } else {
          let_go_off_loop(std::move(used));
        }
      });
  return entry->status(id);
}

proto::reservation_status reservation_book::status(client_id client,
                                                   const proto::reservation_target& target) {
  const auto [id, entry] = targeted(client, target);
  const credentials& who = rows_.client(client).who;
  const object_row& row = *rows_.find(id);
  // As an open by name of what the client may not read: refused, naming it by kind, name and
  // id; its owner and mode for the log alone.
  if (target.reservation_id == 0 && !access_.may_see(who, row)) {
    throw request_error(errc::permission_denied,
                        fmt::format("{} may not read the state of {}: its mode gives this client "
                                    "no read access",
                                    access_policy::describe(who), name_object(id, row)),
                        describe_object(id, row));
  }
  return entry->status(id);
}

bool reservation_book::still_held(object_id id, const versioned_reservation* entry) const noexcept {
  const auto found = entries_.find(id);
  return found != entries_.end() && found->second.get() == entry;
}

void reservation_book::lose_if_owner_left(object_id id, versioned_reservation& entry) {
  const object_row* row = rows_.find(id);
  if (row == nullptr || row->owner != 0 ||
      entry.current_phase() != versioned_reservation::phase::asleep) {
    return;
  }
  let_go_off_loop(entry.lose());
  let_go_off_loop(entry.take_kept_copy());
  rows_.touch(id);
  spdlog::info("reservation {}: lost, its owner let go of it while it slept", id);
}

void reservation_book::keep_sleep_memory(std::uint64_t most_bytes) {
  keep_at_most_ = most_bytes;
  std::uint64_t kept = sleep_memory_kept();
  for (auto& [id, entry] : entries_) {
    if (kept <= keep_at_most_) return;
    if (entry->kept_bytes() == 0) continue;
    spdlog::info("reservation {}: its kept host copy goes (sleep_memory_kept {})", id, most_bytes);
    kept -= entry->kept_bytes();
    let_go_off_loop(entry->take_kept_copy());
  }
}

std::size_t reservation_book::descriptors_to_come() {
  using phase = versioned_reservation::phase;
  std::size_t coming = 0;
  std::erase_if(under_way_, [&](object_id id) {
    const auto found = entries_.find(id);
    if (found == entries_.end()) return true;
    const versioned_reservation& entry = *found->second;
    switch (entry.current_phase()) {
      case phase::draining:
      case phase::copying_out:
        coming += entry.discards() ? 0 : 1;
        return false;
      case phase::copying_in:
        coming += whole_chunks(entry.committed(), entry.chunk_size());
        return false;
      default:
        return true;
    }
  });
  return coming;
}

void reservation_book::note_under_way(object_id id) {
  descriptors_to_come();  // drops those done, so that the set holds what is under way
  under_way_.insert(id);
}

std::uint64_t reservation_book::sleep_memory_kept() const noexcept {
  std::uint64_t bytes = 0;
  for (const auto& [id, entry] : entries_) bytes += entry->kept_bytes();
  return bytes;
}

void reservation_book::let_go_off_loop(std::optional<sleep_copy> copy) noexcept {
  if (!copy || background_ == nullptr) return;  // without a worker the copy goes here and now
  // Unpinning, unmapping and freeing 32 GiB take seconds: the worker does it.
  try {
    auto going = std::make_shared<std::optional<sleep_copy>>(std::move(copy));
    background_->run([going] { going->reset(); }, [](std::exception_ptr) {});
  } catch (...) {
    // Out of memory for the job: the copy goes here after all.
  }
}

void reservation_book::let_go(object_id id, const object_row& row) noexcept {
  const auto found = entries_.find(id);
  if (found != entries_.end()) {
    versioned_reservation& entry = *found->second;
    std::vector<client_id> gone;
    for (const auto& [holder, version] : entry.mapped()) {
      if (!row.holders.contains(holder)) gone.push_back(holder);
    }
    for (const client_id holder : entry.writers()) {
      if (!row.holders.contains(holder)) gone.push_back(holder);
    }
    if (entry.draft_writer() != 0 && !row.holders.contains(entry.draft_writer())) {
      gone.push_back(entry.draft_writer());
    }
    for (const client_id holder : gone) entry.forget(holder);
    recharge(id);
    rows_.touch(id);
    lose_if_owner_left(id, entry);
    copy_out_when_ready(id);
  }
  if (!row.holders.empty()) return;
  // A copy under way keeps its own reference: the entry goes when the copy is done.
  if (found != entries_.end()) let_go_off_loop(found->second->take_kept_copy());
  entries_.erase(id);
  rows_.erase(id);
}

proto::reservation_list_reply reservation_book::list(client_id asker, object_id after) const {
  const credentials& who = rows_.client(asker).who;
  return rows_.page<proto::reservation_record>(
      object_family::reservation, after, kPageSize,
      [&](const object_row& row) { return access_.may_see(who, row); },
      [&](object_id id, const object_row& row) {
        const versioned_reservation& entry = *entries_.at(id);
        proto::reservation_record record{};
        record.reservation_id = id;
        record.max_size = entry.max_size();
        record.committed = entry.committed();
        record.owner_client_id = row.owner;
        record.holders = static_cast<std::uint32_t>(row.holders.size());
        record.device = entry.device();
        record.name = to_wire(row.name);
        record.version = entry.version();
        record.draft_version = entry.draft_version();
        record.oldest_mapped = entry.oldest_mapped();
        record.retained_bytes = entry.retained_bytes();
        record.host_bytes = entry.host_copy() ? entry.host_copy()->bytes : 0;
        record.state = entry.state();
        record.holders_current = entry.holders_on(entry.version());
        record.holders_behind = entry.holders_behind();
        return record;
      });
}

void reservation_book::recharge(object_id id) noexcept {
  const auto found = entries_.find(id);
  const object_row* row = rows_.find(id);
  if (found == entries_.end() || row == nullptr) return;
  const std::uint64_t bytes = found->second->committed() + found->second->retained_bytes();
  if (row->bytes != bytes) rows_.set_bytes(id, bytes);
}

void reservation_book::adopt(object_id id, std::unique_ptr<versioned_reservation> adopted) {
  entries_.insert_or_assign(id, std::shared_ptr<versioned_reservation>(std::move(adopted)));
  // The saved row's bytes are what the daemon before charged, and an earlier gpumemd charged
  // the current version only: charged again from what was adopted.
  recharge(id);
}

const versioned_reservation* reservation_book::find(object_id id) const noexcept {
  const auto found = entries_.find(id);
  return found == entries_.end() ? nullptr : found->second.get();
}

}  // namespace gpumem::daemon
