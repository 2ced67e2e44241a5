#include "sync/sync_book.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <limits>
#include <new>
#include <optional>
#include <string>

#include "gpumem/shared/sync/counters.hpp"
#include "gpumem/shared/sync/lock.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;
using proto::sync_kind;

namespace {

// Cells are shared with clients that change them at any time: every read is atomic.
std::uint32_t load(const std::uint32_t& word) noexcept {
  return std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(word))
      .load(std::memory_order_acquire);
}

bool same_layout(const proto::channel_layout& a, const proto::channel_layout& b) noexcept {
  return a.slots == b.slots && a.slot_bytes == b.slot_bytes;
}

std::string layout_text(const proto::channel_layout& layout) {
  return fmt::format("{} slots of {} bytes", layout.slots, layout.slot_bytes);
}

object_kind kind_of(sync_kind kind) noexcept {
  switch (kind) {
    case sync_kind::barrier:
      return object_kind::barrier;
    case sync_kind::channel:
      return object_kind::channel;
    case sync_kind::lock:
      break;
  }
  return object_kind::lock;
}

sync_kind wire_kind(object_kind kind) noexcept {
  switch (kind) {
    case object_kind::barrier:
      return sync_kind::barrier;
    case object_kind::channel:
      return sync_kind::channel;
    default:
      return sync_kind::lock;
  }
}

}  // namespace

sync_book::sync_book(ledger& rows, const access_policy& access, const quota_policy& quotas,
                     descriptor_budget& descriptors, signal_page_maker make_signal_page)
    : rows_(rows),
      access_(access),
      quotas_(quotas),
      descriptors_(descriptors),
      make_signal_page_(std::move(make_signal_page)) {}

sync_book::attachment sync_book::attach(client_id client) {
  if (const auto found = attached_.find(client); found != attached_.end()) {
    return {found->second.slot, *pages_.at(found->second.own_page)};
  }
  const credentials& who = rows_.client(client).who;
  for (std::uint16_t slot = 1; slot <= sync::kMaxSlots; ++slot) {
    if (slot_taken_.test(slot)) continue;
    sync_page& own = page_of_class(access_class::for_sync(who.uid, who.gid, access_.mode_for(0)));
    own.attach();
    slot_taken_.set(slot);
    attached_.emplace(client, attached_client{slot, own.id()});
    rows_.touch_client(client);
    return {slot, own};
  }
  throw request_error(errc::out_of_memory,
                      fmt::format("all {} lock slots are taken", sync::kMaxSlots));
}

sync_page& sync_book::page_of_class(const access_class& tenant) {
  if (const auto found = class_pages_.find(tenant); found != class_pages_.end()) {
    return *pages_.at(*found->second.begin());
  }
  return make_page(tenant);
}

sync_page& sync_book::make_page(const access_class& tenant) {
  std::uint32_t id = 0;
  for (const auto& [taken, page] : pages_) {
    if (taken != id) break;
    ++id;
  }
  if (id >= sync::kMaxPages) {
    throw request_error(errc::out_of_memory,
                        fmt::format("all {} lock and barrier pages are taken", sync::kMaxPages));
  }
  descriptors_.check(1, fmt::format("a lock and barrier page for uid {}", tenant.owner));
  auto made = std::make_unique<sync_page>(id, tenant);
  std::set<std::uint32_t>& of_class = class_pages_[tenant];
  try {
    of_class.insert(id);
    sync_page& placed = *pages_.emplace(id, std::move(made)).first->second;
    rows_.touch_page(id);
    return placed;
  } catch (...) {
    of_class.erase(id);
    if (of_class.empty()) class_pages_.erase(tenant);
    throw;
  }
}

void sync_book::free_page_if_unused(std::uint32_t page_id) noexcept {
  const auto found = pages_.find(page_id);
  if (found == pages_.end() || !found->second->unused()) return;
  const auto of_class = class_pages_.find(found->second->tenant());
  if (of_class != class_pages_.end()) {
    of_class->second.erase(page_id);
    if (of_class->second.empty()) class_pages_.erase(of_class);
  }
  pages_.erase(found);
  rows_.touch_page(page_id);
}

const sync_page& sync_book::page_for(client_id client, std::uint32_t page_id) const {
  const auto found = pages_.find(page_id);
  // One answer whether the page is missing or not the client's: ids tell nothing of others.
  if (found == pages_.end() ||
      !access_.may_open(rows_.client(client).who, found->second->tenant().sample(),
                        wanted_access::read_write)) {
    throw request_error(
        errc::not_found,
        fmt::format("no lock and barrier page {} whose objects this client may use", page_id));
  }
  return *found->second;
}

std::pair<sync_page*, std::uint32_t> sync_book::take_cell(object_id id,
                                                          const access_class& tenant) {
  do {
    if (const auto found = class_pages_.find(tenant); found != class_pages_.end()) {
      for (const std::uint32_t page_id : found->second) {
        sync_page& page = *pages_.at(page_id);
        if (const auto cell = page.take_cell(id)) return {&page, *cell};
      }
    }
  } while (evict_kept(tenant));
  sync_page& page = make_page(tenant);
  return {&page, *page.take_cell(id)};
}

bool sync_book::evict_kept(const access_class& tenant) noexcept {
  // Kept locks are bounded by the class's cells: the oldest gives way to an object someone uses.
  const auto of_class = class_pages_.find(tenant);
  if (of_class == class_pages_.end()) return false;
  std::optional<object_id> oldest;
  for (const std::uint32_t page_id : of_class->second) {
    const auto first = kept_.lower_bound({page_id, 0});
    if (first == kept_.end() || first->first != page_id) continue;
    if (!oldest || first->second < *oldest) oldest = first->second;
  }
  if (!oldest) return false;
  if (const object_row* row = rows_.find(*oldest)) {
    spdlog::warn(
        "lock '{}' (id {}): nobody held it since its holder died; its cell is needed, so "
        "it is forgotten",
        row->name, *oldest);
  }
  forget(*oldest);
  return true;
}

void sync_book::set_kept(object_id id, cell_entry& entry, bool kept) {
  if (kept) {
    kept_.emplace(entry.page, id);
  } else {
    kept_.erase({entry.page, id});
  }
  entry.kept = kept;
}

sync::lock_facts sync_book::lock_facts_of(const cell_entry& entry) const noexcept {
  return {static_cast<std::uint16_t>(entry.epoch), slot_taken_};
}

sync::counter_facts sync_book::counter_facts_of(const object_row& row,
                                                const cell_entry& entry) const noexcept {
  return {entry.parties, entry.epoch, row.kind == object_kind::channel};
}

const char* sync_book::check(const object_row& row, const cell_entry& entry) const noexcept {
  if (row.kind == object_kind::lock) {
    return sync::check_lock_cell(cell_as<sync::lock_cell>(entry), lock_facts_of(entry));
  }
  return sync::check_counter_cell(cell_as<sync::counter_cell>(entry), counter_facts_of(row, entry));
}

void sync_book::mark_corrupt(object_id id, const object_row& row, cell_entry& entry,
                             const char* rule) noexcept {
  if (entry.corrupt_rule != nullptr) return;
  entry.corrupt_rule = rule;
  rows_.touch(id);
  spdlog::warn("{} '{}' (id {}) found corrupt: {}; refused until `gpumemctl reset {}`",
               kind_name(row.kind), row.name, id, rule, row.name);
  // Its users go on with the page without asking the daemon: tell them there.
  if (row.kind == object_kind::lock) {
    sync::mark_lock_not_recoverable(cell_as<sync::lock_cell>(entry));
  } else {
    sync::break_counters(cell_as<sync::counter_cell>(entry));
  }
}

std::uint32_t sync_book::take_party(cell_entry& entry, const object_row& row, client_id client,
                                    proto::sync_role role) {
  // A vacated party's GPU count already jumped kBrokenLead ahead. A second client in its place
  // that left too would jump it again, 2^31 ahead, which stream waits read as behind: they
  // would wait forever. So a broken object takes nobody until a reset starts it over.
  if (entry.broken) {
    throw request_error(errc::wrong_state,
                        fmt::format("{} '{}' is broken (a party died or left): nobody joins it "
                                    "until `gpumemctl reset {} --parties {}` starts it over",
                                    kind_name(row.kind), row.name, row.name, entry.parties));
  }
  std::uint32_t first = 0;
  std::uint32_t last = entry.parties;
  if (role == proto::sync_role::producer) last = 1;
  if (role == proto::sync_role::consumer) first = 1;
  for (std::uint32_t party = first; party < last; ++party) {
    if (entry.party_clients[party] != 0) continue;
    entry.party_clients[party] = client;
    return party;
  }
  const char* which = role == proto::sync_role::producer   ? "the producer's place"
                      : role == proto::sync_role::consumer ? "every consumer's place"
                                                           : "every party's place";
  throw request_error(errc::no_party_left,
                      fmt::format("{} '{}': {} is taken", kind_name(row.kind), row.name, which));
}

void sync_book::check_slots_owner(const std::string& channel, uid_t channel_owner) const {
  const std::string slots = channel + ".slots";
  const auto found = rows_.find_name(object_family::allocation, slots);
  if (!found) return;
  const uid_t slots_owner = rows_.find(*found)->owner_uid;
  if (slots_owner == channel_owner) return;
  throw request_error(errc::permission_denied,
                      fmt::format("channel '{}': its slots, allocation '{}', were made by another "
                                  "user than the channel, who could read and change every item "
                                  "(was the name taken before the channel was made?)",
                                  channel, slots),
                      fmt::format("the allocation's owner is uid {}, the channel's uid {}",
                                  slots_owner, channel_owner));
}

sync_book::opened sync_book::open(client_id client, const proto::sync_open_request& request,
                                  const proto::channel_layout* layout) {
  const auto attached = attached_.find(client);
  if (attached == attached_.end()) {
    throw request_error(errc::bad_message,
                        "attach_sync must come before open_sync and open_channel");
  }
  const std::string name(request.name.view());
  const object_kind kind = kind_of(request.kind);
  const bool counters = kind != object_kind::lock;
  if (counters && request.parties > sync::kMaxParties) {
    throw request_error(errc::invalid_argument,
                        fmt::format("{} parties: at most {}", request.parties, sync::kMaxParties));
  }
  if (layout != nullptr &&
      (layout->slots == 0 || layout->slot_bytes == 0 ||
       layout->slot_bytes > std::numeric_limits<std::uint64_t>::max() / layout->slots)) {
    throw request_error(errc::invalid_argument,
                        fmt::format("channel '{}': {}; slots and slot bytes must be positive and "
                                    "their product fit in 64 bits",
                                    name, layout_text(*layout)));
  }
  object_id id = 0;
  if (const auto known = rows_.find_name(object_family::sync, name)) {
    id = *known;
    const object_row& existing = *rows_.find(id);
    if (existing.kind != kind) {
      throw request_error(
          errc::already_exists,
          fmt::format("'{}' is a {}, not a {}", name, kind_name(existing.kind), kind_name(kind)));
    }
    access_.check_open(rows_.client(client).who, id, existing, wanted_access::read_write,
                       whose_from(request.flags));
    if (kind == object_kind::channel) check_slots_owner(name, existing.owner_uid);
    cell_entry& known_entry = objects_.at(id);
    if (known_entry.parties != request.parties) {
      throw request_error(errc::invalid_argument,
                          fmt::format("{} '{}' has {} parties, not {}", kind_name(kind), name,
                                      known_entry.parties, request.parties));
    }
    if (layout != nullptr && known_entry.layout.slots != 0 &&
        !same_layout(known_entry.layout, *layout)) {
      throw request_error(errc::invalid_argument,
                          fmt::format("channel '{}' has {}, not {}: a party that cut its slots "
                                      "otherwise would read its items at the wrong offsets",
                                      name, layout_text(known_entry.layout), layout_text(*layout)));
    }
    if (const char* rule = check(existing, known_entry)) {
      mark_corrupt(id, existing, known_entry, rule);
    }
    if (known_entry.corrupt_rule != nullptr) {
      throw request_error(errc::not_recoverable,
                          fmt::format("{} '{}' was found corrupt ({}): `gpumemctl reset {}` "
                                      "re-initialises it",
                                      kind_name(kind), name, known_entry.corrupt_rule, name));
    }
    set_kept(id, known_entry, false);
    rows_.hold(id, client);
  } else {
    if (kind == object_kind::channel) check_slots_owner(name, rows_.client(client).who.uid);
    charge one_object;
    one_object.sync_objects = 1;
    quotas_.check(rows_, client, one_object);
    id = rows_.add(client, {kind, name, 0, proto::kHostDevice, access_.mode_for(request.flags)});
    const object_row& made = *rows_.find(id);
    std::pair<sync_page*, std::uint32_t> cell{nullptr, 0};
    try {
      cell = take_cell(id, access_class::for_sync(made.owner_uid, made.owner_gid, made.mode));
      objects_.emplace(id, cell_entry{cell.first->id(), cell.second, request.parties,
                                      std::vector<client_id>(request.parties, 0)});
    } catch (...) {
      if (cell.first != nullptr) {
        cell.first->free_cell(cell.second);
        free_page_if_unused(cell.first->id());
      }
      rows_.erase(id);
      throw;
    }
    if (counters) cell_as<sync::counter_cell>(objects_.at(id)).parties = request.parties;
  }
  cell_entry& entry = objects_.at(id);
  proto::sync_open_reply reply{sync::cell_id(entry.page, entry.cell), 0, entry.parties, entry.page};
  try {
    if (counters) reply.party = take_party(entry, *rows_.find(id), client, request.role);
  } catch (...) {
    rows_.drop_reference(id, client);
    forget_if_unused(id);
    throw;
  }
  // Kept only once a place is taken, so that a refused opener leaves nothing behind, and only
  // by an opener alone on the channel: one that joins parties which came through open_sync
  // (an earlier libgpumem, or an earlier daemon's channel), whose layout nobody checked, could
  // be the one that cut the slots wrongly, and would then lock the right ones out.
  if (layout != nullptr && entry.layout.slots == 0 &&
      std::count(entry.party_clients.begin(), entry.party_clients.end(), client_id{0}) ==
          static_cast<std::ptrdiff_t>(entry.parties) - 1) {
    entry.layout = *layout;
    rows_.touch(id);
  }
  // Whether the client has the page mapped: its own, or one it has another object open on.
  bool mapped = entry.page == attached->second.own_page;
  if (!mapped) {
    try {
      mapped = attached->second.opens_on_page[entry.page]++ != 0;
    } catch (const std::bad_alloc&) {  // the open stands; an uncounted page is sent again
    }
  }
  const bool send_page = (request.flags & proto::kFlagSendPage) != 0 && !mapped;
  return {reply, send_page ? pages_.at(entry.page).get() : nullptr};
}

void sync_book::close(client_id client, const proto::sync_close_request& request) {
  const auto page = pages_.find(sync::page_of_cell(request.cell));
  const object_id id =
      page == pages_.end() ? 0 : page->second->object_in(sync::index_of_cell(request.cell));
  const object_row* row = rows_.find(id);
  if (row == nullptr || !row->holders.contains(client)) {
    throw request_error(errc::not_found, fmt::format("no open object in cell {}", request.cell));
  }
  cell_entry& entry = objects_.at(id);
  if (row->kind != object_kind::lock) {
    if (request.party >= entry.parties || entry.party_clients[request.party] != client) {
      throw request_error(errc::invalid_argument,
                          fmt::format("party {} of '{}' is not yours", request.party, row->name));
    }
    entry.party_clients[request.party] = 0;
    // Whoever waits for a round or an item this party will never reach would wait forever.
    break_party(id, *row, entry, request.party);
  }
  if (const auto attached = attached_.find(client); attached != attached_.end()) {
    auto& opens = attached->second.opens_on_page;
    if (const auto on_page = opens.find(entry.page);
        on_page != opens.end() && --on_page->second == 0) {
      opens.erase(on_page);
    }
  }
  const bool last_of_client = rows_.drop_reference(id, client);
  const auto attached = attached_.find(client);
  if (last_of_client && row->kind == object_kind::lock && used_on_the_host(*row, entry) &&
      attached != attached_.end()) {
    // With its last Lock of this name the client let go of any way to release a host hold or to
    // take a host turn it queued for: they go as at its death, the next holder learning that
    // the owner died. (Its streams' turns and its kernels' hold may still be on their way on
    // the GPU: those stay until it exits.) A hand-off still in flight under its slot (another
    // of its threads in acquire() on the object it closed) is left for its exit: a clean-up
    // pending under a live slot would take that slot's next hold of the lock for a dead one's.
    reclaim(id, *row, attached->second.slot, client);
  }
  forget_if_unused(id);
}

bool sync_book::used_on_the_host(const object_row& row, const cell_entry& entry) const noexcept {
  const sync::domain where = sync::domain_of(domain_word(row, entry));
  return where != sync::domain::stream && where != sync::domain::device;
}

void sync_book::forget_if_unused(object_id id) noexcept {
  const object_row* row = rows_.find(id);
  if (row == nullptr || !row->holders.empty()) return;
  if (std::any_of(pending_.begin(), pending_.end(),
                  [&](const pending_reclaim& each) { return each.id == id; })) {
    return;
  }
  const auto found = objects_.find(id);
  if (found != objects_.end() && row->kind == object_kind::lock &&
      (found->second.kept || worth_keeping(*row, found->second))) {
    // Like a robust mutex in shared memory: whoever opens it next learns the owner died.
    try {
      set_kept(id, found->second, true);
      return;
    } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): it cannot be kept
    }
  }
  forget(id);
}

void sync_book::forget(object_id id) noexcept {
  const object_row* row = rows_.find(id);
  if (row == nullptr) return;
  const auto found = objects_.find(id);
  if (found != objects_.end()) {
    if (signal_page* page = gpu_page_of(*row, found->second)) {
      try {
        page->clear(found->second.cell);
      } catch (const std::exception& error) {
        spdlog::error("{} '{}': clearing its signal cell: {}", kind_name(row->kind), row->name,
                      error.what());
      }
    }
    const std::uint32_t page_id = found->second.page;
    kept_.erase({page_id, id});
    pages_.at(page_id)->free_cell(found->second.cell);
    objects_.erase(found);
    free_page_if_unused(page_id);
  }
  rows_.erase(id);
}

bool sync_book::worth_keeping(const object_row& row, const cell_entry& entry) noexcept {
  if (entry.corrupt_rule != nullptr) return true;
  const auto word = sync::load_lock_word(cell_as<sync::lock_cell>(entry));
  if ((word.flags & (sync::lock_word::kOwnerDied | sync::lock_word::kNotRecoverable)) != 0) {
    return true;
  }
  signal_page* page = gpu_page_of(row, entry);
  if (page == nullptr || sync::domain_of(domain_word(row, entry)) != sync::domain::device) {
    return false;
  }
  try {
    return page->read(entry.cell, offsetof(sync::signal_cell, owner_died)) != 0;
  } catch (const std::exception& error) {
    spdlog::error("lock '{}': reading its signal cell: {}", row.name, error.what());
    return false;
  }
}

std::uint32_t sync_book::domain_word(const object_row& row,
                                     const cell_entry& entry) const noexcept {
  return load(row.kind == object_kind::lock ? cell_as<sync::lock_cell>(entry).domain
                                            : cell_as<sync::counter_cell>(entry).domain);
}

signal_page* sync_book::signal_page_for(const cell_entry& entry,
                                        std::uint32_t domain_word) noexcept {
  const sync::domain where = sync::domain_of(domain_word);
  if (where != sync::domain::stream && where != sync::domain::device) return nullptr;
  return pages_.at(entry.page)->signal_page_on(sync::device_of(domain_word));
}

signal_page* sync_book::gpu_page_of(const object_row& row, const cell_entry& entry) noexcept {
  return signal_page_for(entry, domain_word(row, entry));
}

const signal_page& sync_book::signal_page_of(client_id client, std::uint32_t page_id,
                                             std::int32_t device) {
  const sync_page& page = page_for(client, page_id);
  if (!make_signal_page_) {
    throw request_error(errc::not_supported,
                        "stream-ordered and device locks and barriers need CUDA, which this "
                        "daemon does not have");
  }
  sync_page& held = *pages_.at(page.id());
  if (held.signal_page_on(device) == nullptr) {
    descriptors_.check(1, fmt::format("the signal page of lock and barrier page {} on device {}",
                                      page.id(), device));
  }
  rows_.touch_page(page.id());
  return held.make_signal_page(device, make_signal_page_);
}

client_id sync_book::client_of_slot(std::uint16_t slot) const noexcept {
  for (const auto& [client, attached] : attached_) {
    if (attached.slot == slot) return client;
  }
  return 0;
}

void sync_book::let_go(object_id id, const object_row& row, client_id client) noexcept {
  if (const auto found = attached_.find(client); found != attached_.end()) {
    if (reclaim(id, row, found->second.slot, client) == sync::repair_status::in_flight) {
      pending_.push_back({found->second.slot, id});
    }
  }
  forget_if_unused(id);
}

void sync_book::detach(client_id client) noexcept {
  const auto found = attached_.find(client);
  if (found == attached_.end()) return;
  const std::uint16_t slot = found->second.slot;
  const std::uint32_t own_page = found->second.own_page;
  attached_.erase(found);
  pages_.at(own_page)->detach();
  free_page_if_unused(own_page);
  const bool slot_pending =
      std::any_of(pending_.begin(), pending_.end(),
                  [&](const pending_reclaim& each) { return each.slot == slot; });
  if (!slot_pending) slot_taken_.reset(slot);
}

bool sync_book::settle() noexcept {
  // A hand-off between live processes takes microseconds; one that stays in flight this many
  // rounds of settle() (ten seconds at the server's pace) is a cell written to look so.
  constexpr unsigned kMaxAttempts = 1000;
  std::vector<pending_reclaim> still;
  std::vector<object_id> finished;
  for (pending_reclaim each : pending_) {
    const object_row* row = rows_.find(each.id);
    if (row == nullptr) continue;
    if (reclaim(each.id, *row, each.slot, 0) != sync::repair_status::in_flight) {
      finished.push_back(each.id);
    } else if (++each.attempts == kMaxAttempts) {
      mark_corrupt(each.id, *row, objects_.at(each.id),
                   "a hand-off to or from a dead client stayed in flight");
      finished.push_back(each.id);
    } else {
      still.push_back(each);
    }
  }
  std::vector<std::uint16_t> freed;
  for (const pending_reclaim& each : pending_) {
    const bool waiting = std::any_of(still.begin(), still.end(),
                                     [&](const pending_reclaim& s) { return s.slot == each.slot; });
    if (!waiting) freed.push_back(each.slot);
  }
  pending_ = std::move(still);
  for (const object_id id : finished) forget_if_unused(id);
  for (const std::uint16_t slot : freed) slot_taken_.reset(slot);
  pass_arrived_turns();
  return !has_pending();
}

bool sync_book::has_waiting_turns() const noexcept {
  for (const auto& [id, page] : pages_) {
    for (const auto& [device, signals] : page->signal_pages()) {
      if (signals->waiting_turn_count() > 0) return true;
    }
  }
  return false;
}

void sync_book::pass_arrived_turns() noexcept {
  for (const auto& [id, page] : pages_) {
    for (const auto& [device, signals] : page->signal_pages()) {
      signals->pass_arrived_turns([&](std::uint32_t cell, std::uint32_t turn) {
        // A freed or rewritten cell has no entry of the turn's left to free; one found corrupt
        // since still has it, and live clients that queue there need it free.
        const auto entry = objects_.find(page->object_in(cell));
        if (entry == objects_.end()) return;
        const object_row* row = rows_.find(entry->first);
        if (row == nullptr || row->kind != object_kind::lock) return;
        sync::free_passed_turn(cell_as<sync::lock_cell>(entry->second),
                               static_cast<std::uint16_t>(turn));
      });
    }
  }
}

sync::repair_status sync_book::reclaim(object_id id, const object_row& row, std::uint16_t dead_slot,
                                       client_id dead_client) noexcept {
  try {
    cell_entry& entry = objects_.at(id);
    if (row.kind == object_kind::lock) {
      // A corrupt cell is left as it is until an operator rewrites it.
      if (entry.corrupt_rule != nullptr) return sync::repair_status::done;
      auto& cell = cell_as<sync::lock_cell>(entry);
      const bool held_on_host = sync::load_lock_word(cell).owner == dead_slot;
      const auto done =
          sync::reclaim(cell, gpu_page_of(row, entry), entry.cell, dead_slot, lock_facts_of(entry));
      if (done.repair.status == sync::repair_status::corrupt) {
        mark_corrupt(id, row, entry, done.repair.broken_rule);
      } else if ((held_on_host || done.turns_passed > 0 || done.device_lock_released) &&
                 owner_death_) {
        // The pid as this daemon sees it while the dead client's row lasts; 0 once it is gone.
        const auto& clients = rows_.clients();
        const auto dead_row = clients.find(dead_client);
        owner_death_(
            {id, row, dead_client, dead_row != clients.end() ? dead_row->second.who.pid : 0});
      }
      if (done.turns_passed > 0) {
        spdlog::warn("lock '{}': passing on {} turn(s) of a dead client as they come", row.name,
                     done.turns_passed);
      }
      if (done.device_lock_released) {
        spdlog::warn("lock '{}': released the device lock of a dead client", row.name);
      }
      return done.repair.status;
    }
    for (std::uint32_t party = 0; dead_client != 0 && party < entry.parties; ++party) {
      if (entry.party_clients[party] != dead_client) continue;
      entry.party_clients[party] = 0;
      spdlog::warn("{} '{}' broken: party {} died", kind_name(row.kind), row.name, party);
      break_party(id, row, entry, party);
    }
    return sync::repair_status::done;
  } catch (const std::exception& error) {
    spdlog::error("{} '{}': cleaning up after a dead client: {}", kind_name(row.kind), row.name,
                  error.what());
    return sync::repair_status::done;
  }
}

void sync_book::break_party(object_id id, const object_row& row, cell_entry& entry,
                            std::uint32_t party) {
  rows_.touch(id);
  entry.broken = true;
  auto& cell = cell_as<sync::counter_cell>(entry);
  if (const char* rule = sync::check_counter_cell(cell, counter_facts_of(row, entry))) {
    mark_corrupt(id, row, entry, rule);
  }
  // Breaking is safe on any words: it sets a flag, wakes, and moves the party's own count.
  sync::break_party(cell, signal_page_for(entry, load(cell.domain)), entry.cell, party);
}

void sync_book::reset(client_id client, const proto::sync_reset_request& request) {
  const std::string name(request.name.view());
  const auto known = rows_.find_name(object_family::sync, name);
  if (!known) {
    throw request_error(errc::not_found, fmt::format("no lock, barrier or channel '{}'", name));
  }
  const object_id id = *known;
  const object_row& row = *rows_.find(id);
  const client_row& asker = rows_.client(client);
  access_.check_operate(asker.who, id, row, "reset");
  const std::string by = access_policy::describe(asker.who, asker.label);
  cell_entry& entry = objects_.at(id);
  signal_page* page = gpu_page_of(row, entry);
  const char* rewritten_because = entry.corrupt_rule;
  if (row.kind == object_kind::lock) {
    if (request.parties != 0) {
      throw request_error(errc::invalid_argument,
                          fmt::format("'{}' is a lock: a party count is for barriers and "
                                      "channels",
                                      name));
    }
    auto& cell = cell_as<sync::lock_cell>(entry);
    const auto new_epoch = static_cast<std::uint16_t>(entry.epoch + 1);
    if (rewritten_because != nullptr) {
      sync::rewrite(cell, page, entry.cell, new_epoch);
    } else {
      const sync::reset_result done = sync::reset(cell, page, entry.cell, lock_facts_of(entry));
      if (!done.supported) {
        throw request_error(errc::not_supported,
                            fmt::format("lock '{}' is stream-ordered: its turns pass on by "
                                        "themselves after a death and it has nothing to reset",
                                        name));
      }
      rewritten_because = done.rewritten_because;
    }
    entry.epoch = new_epoch;
  } else {
    std::uint32_t parties = request.parties;
    std::uint32_t highest_taken = 0;
    for (std::uint32_t party = 0; party < entry.parties; ++party) {
      if (entry.party_clients[party] != 0) highest_taken = party + 1;
    }
    if (parties == 0) parties = highest_taken;
    if (parties > sync::kMaxParties) {
      throw request_error(errc::invalid_argument,
                          fmt::format("{} '{}': {} parties: at most {}", kind_name(row.kind), name,
                                      parties, sync::kMaxParties));
    }
    if (parties < highest_taken || (row.kind == object_kind::channel && parties < 2)) {
      throw request_error(errc::invalid_argument,
                          fmt::format("{} '{}': {} parties cannot hold the {} attached",
                                      kind_name(row.kind), name, parties, highest_taken));
    }
    auto& cell = cell_as<sync::counter_cell>(entry);
    if (rewritten_because == nullptr) rewritten_because = check(row, entry);
    // Whatever can fail first, then the cell: when its GPU words cannot be cleared, the object
    // stays as it was.
    std::vector<client_id> party_clients = entry.party_clients;
    party_clients.resize(parties, 0);
    const std::uint32_t epoch = entry.epoch + 1;
    if (rewritten_because != nullptr) {
      sync::rewrite(cell, page, entry.cell, parties, epoch);
    } else {
      sync::reset(cell, page, entry.cell, parties, epoch);
    }
    entry.parties = parties;
    entry.party_clients = std::move(party_clients);
    entry.epoch = epoch;
    entry.broken = false;
  }
  entry.corrupt_rule = nullptr;
  if (rewritten_because != nullptr) {
    spdlog::warn(
        "{} '{}' (id {}) reset by {}: it was corrupt ({}), rewritten from "
        "scratch",
        kind_name(row.kind), name, id, by, rewritten_because);
  } else if (row.kind == object_kind::lock) {
    spdlog::info("lock '{}' reset by {}", name, by);
  } else {
    spdlog::info("{} '{}' reset by {}: {} parties", kind_name(row.kind), name, by, entry.parties);
  }
  // A kept lock was kept for the state the reset just cleared.
  set_kept(id, entry, false);
  rows_.touch(id);
  forget_if_unused(id);
}

std::optional<sync_book::saved_cell> sync_book::cell_of(object_id id) const {
  const auto found = objects_.find(id);
  if (found == objects_.end()) return std::nullopt;
  const cell_entry& entry = found->second;
  return saved_cell{entry.page,          entry.cell,   entry.parties,
                    entry.party_clients, entry.epoch,  entry.corrupt_rule != nullptr,
                    entry.kept,          entry.broken, entry.layout};
}

std::optional<sync_book::saved_attachment> sync_book::attachment_of(client_id client) const {
  const auto found = attached_.find(client);
  if (found == attached_.end()) return std::nullopt;
  return saved_attachment{found->second.slot, found->second.own_page};
}

std::vector<sync_book::saved_reclaim> sync_book::pending_reclaims() const {
  std::vector<saved_reclaim> saved;
  for (const pending_reclaim& each : pending_) saved.push_back({each.slot, each.id});
  return saved;
}

const sync_page* sync_book::page_by_id(std::uint32_t page_id) const noexcept {
  const auto found = pages_.find(page_id);
  return found == pages_.end() ? nullptr : found->second.get();
}

std::vector<std::uint32_t> sync_book::page_ids() const {
  std::vector<std::uint32_t> ids;
  for (const auto& [id, page] : pages_) ids.push_back(id);
  return ids;
}

void sync_book::adopt_page(std::unique_ptr<sync_page> adopted) {
  const std::uint32_t id = adopted->id();
  class_pages_[adopted->tenant()].insert(id);
  pages_.insert_or_assign(id, std::move(adopted));
  rows_.touch_page(id);
}

void sync_book::adopt_cell(object_id id, const saved_cell& saved) {
  const auto page = pages_.find(saved.page);
  if (page == pages_.end() || !page->second->restore_cell(saved.cell, id) ||
      saved.party_clients.size() != saved.parties) {
    throw request_error(
        errc::internal,
        fmt::format("object {}: cell {} of page {} is gone or taken", id, saved.cell, saved.page));
  }
  cell_entry entry{saved.page, saved.cell, saved.parties, saved.party_clients, saved.epoch};
  entry.broken = saved.broken;
  entry.layout = saved.layout;
  const object_row* row = rows_.find(id);
  if (saved.corrupt && row != nullptr) {
    // The rule's text is not kept: the cell is checked again, and still refused if it passes.
    const char* rule = check(*row, entry);
    entry.corrupt_rule = rule != nullptr ? rule : "found corrupt before gpumemd restarted";
  }
  set_kept(id, objects_.insert_or_assign(id, std::move(entry)).first->second, saved.kept);
}

void sync_book::adopt_attachment(client_id client, const saved_attachment& saved) {
  const auto page = pages_.find(saved.own_page);
  if (page == pages_.end() || saved.slot == 0 || saved.slot > sync::kMaxSlots ||
      slot_taken_.test(saved.slot)) {
    throw request_error(errc::internal,
                        fmt::format("client {}: slot {} or page {} is gone or taken", client,
                                    saved.slot, saved.own_page));
  }
  page->second->attach();
  slot_taken_.set(saved.slot);
  attached_.insert_or_assign(client, attached_client{saved.slot, saved.own_page});
}

void sync_book::resume_dead_turns() noexcept {
  for (auto& [id, entry] : objects_) {
    const object_row* row = rows_.find(id);
    if (row == nullptr || row->kind != object_kind::lock || entry.corrupt_rule != nullptr) continue;
    // No signal page, no turn: reclaim() abandons entries only when it gives the page their turns.
    signal_page* page = gpu_page_of(*row, entry);
    if (page == nullptr) continue;
    try {
      const auto resumed = sync::resume_stream_turns(cell_as<sync::lock_cell>(entry), *page,
                                                     entry.cell, lock_facts_of(entry));
      if (resumed.repair.status == sync::repair_status::corrupt) {
        mark_corrupt(id, *row, entry, resumed.repair.broken_rule);
      } else if (resumed.turns_passed > 0) {
        spdlog::info("lock '{}': passing on {} turn(s) of dead clients as they come", row->name,
                     resumed.turns_passed);
      }
    } catch (const std::exception& error) {
      spdlog::error("lock '{}': its dead clients' turns are not passed on: {}", row->name,
                    error.what());
    }
  }
}

void sync_book::adopt_pending(const saved_reclaim& saved) {
  if (saved.slot == 0 || saved.slot > sync::kMaxSlots) return;
  slot_taken_.set(saved.slot);
  pending_.push_back({saved.slot, saved.id});
}

proto::sync_list_reply sync_book::list(client_id asker, object_id after) const {
  const credentials& who = rows_.client(asker).who;
  return rows_.page<proto::sync_record>(
      object_family::sync, after, proto::sync_list_reply::kMaxRecords,
      [&](const object_row& row) { return access_.may_see(who, row); },
      [&](object_id id, const object_row& row) {
        const cell_entry& entry = objects_.at(id);
        proto::sync_record record{};
        record.sync_id = id;
        record.kind = wire_kind(row.kind);
        record.cell = sync::cell_id(entry.page, entry.cell);
        record.parties = entry.parties;
        (void)proto::make_wire_name(row.name, record.name);
        record.domain = domain_word(row, entry);
        if (row.kind == object_kind::lock) {
          auto& cell = cell_as<sync::lock_cell>(entry);
          const auto word = sync::load_lock_word(cell);
          record.attached = static_cast<std::uint32_t>(row.holders.size());
          record.flags = word.flags;
          // Said outright rather than left to a pid: a daemon in its own PID namespace sees
          // pid 0 for clients outside it, and a held lock must never look free.
          if (!word.free()) {
            record.flags |= proto::sync_record::kHeld;
            record.owner_client_id = client_of_slot(word.owner);
            if (record.owner_client_id != 0) {
              record.owner_pid =
                  static_cast<std::uint32_t>(rows_.client(record.owner_client_id).who.pid);
            }
          }
          record.queued = word.waiting();
          record.owner_deaths = load(cell.owner_deaths);
          record.epoch = word.epoch;
        } else {
          const auto& cell = cell_as<sync::counter_cell>(entry);
          record.attached = static_cast<std::uint32_t>(
              std::count_if(entry.party_clients.begin(), entry.party_clients.end(),
                            [](client_id each) { return each != 0; }));
          record.flags = load(cell.state);
          // The daemon's own word for it, whatever a client wrote on the page since.
          if (entry.broken) record.flags |= sync::counter_cell::kBroken;
          record.epoch = load(cell.epoch);
        }
        if (entry.corrupt_rule != nullptr) record.flags |= proto::sync_record::kCorrupt;
        return record;
      });
}

}  // namespace gpumem::daemon
