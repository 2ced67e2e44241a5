#include "sync/sync_registry.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "gpumem/shared/sync/host_counters.hpp"
#include "gpumem/shared/sync/host_lock.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;
using proto::sync_kind;
using sync::domain;

namespace {

// Cells are shared with clients that change them at any time: every read is atomic.
std::uint32_t load(const std::uint32_t& word) noexcept {
  return std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(word))
      .load(std::memory_order_acquire);
}

const char* kind_name(sync_kind kind) noexcept {
  switch (kind) {
    case sync_kind::lock:
      return "lock";
    case sync_kind::barrier:
      return "barrier";
    case sync_kind::channel:
      return "channel";
  }
  return "object";
}

}  // namespace

sync_registry::sync_registry(signal_page_maker make_signal_page)
    : make_signal_page_(std::move(make_signal_page)) {
  page_fd_.reset(::memfd_create("gpumemd-sync", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!page_fd_ || ::ftruncate(page_fd_.get(), sync::kHostPageSize) != 0 ||
      ::fcntl(page_fd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    throw std::runtime_error(std::string("lock page: ") + std::strerror(errno));
  }
  void* mapped =
      ::mmap(nullptr, sync::kHostPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd_.get(), 0);
  if (mapped == MAP_FAILED) {
    throw std::runtime_error(std::string("lock page: mmap: ") + std::strerror(errno));
  }
  page_ = static_cast<std::byte*>(mapped);
}

sync_registry::~sync_registry() {
  ::munmap(page_, sync::kHostPageSize);
}

std::uint16_t sync_registry::attach(std::uint64_t client, pid_t pid) {
  if (const auto found = clients_.find(client); found != clients_.end()) {
    return found->second.slot;
  }
  for (std::uint16_t slot = 1; slot <= sync::kMaxSlots; ++slot) {
    if (slot_taken_[slot]) continue;
    slot_taken_[slot] = true;
    clients_.emplace(client, attached_client{slot, pid});
    return slot;
  }
  throw request_error(errc::out_of_memory,
                      fmt::format("all {} lock slots are taken", sync::kMaxSlots));
}

std::uint32_t sync_registry::take_cell() {
  // Round robin, so that a freed cell is reused as late as possible: a repair queued on a
  // signal page for its old object may still be waiting its turn.
  for (std::uint32_t tried = 0; tried < sync::kCellCount; ++tried) {
    const std::uint32_t cell = (next_cell_ + tried) % sync::kCellCount;
    if (cell_taken_[cell]) continue;
    cell_taken_[cell] = true;
    next_cell_ = cell + 1;
    std::memset(page_ + cell * sync::kCellSize, 0, sync::kCellSize);
    return cell;
  }
  throw request_error(errc::out_of_memory,
                      fmt::format("all {} lock and barrier cells are taken", sync::kCellCount));
}

std::uint32_t sync_registry::take_party(object& found, std::uint64_t client,
                                        proto::sync_role role) {
  std::uint32_t first = 0;
  std::uint32_t last = found.parties;
  if (role == proto::sync_role::producer) last = 1;
  if (role == proto::sync_role::consumer) first = 1;
  for (std::uint32_t party = first; party < last; ++party) {
    if (found.party_clients[party] != 0) continue;
    found.party_clients[party] = client;
    return party;
  }
  const char* which = role == proto::sync_role::producer   ? "the producer's place"
                      : role == proto::sync_role::consumer ? "every consumer's place"
                                                           : "every party's place";
  throw request_error(errc::no_party_left, fmt::format("{} '{}': {} is taken",
                                                       kind_name(found.kind), found.name, which));
}

proto::sync_open_reply sync_registry::open(std::uint64_t client,
                                           const proto::sync_open_request& request) {
  if (!clients_.contains(client)) {
    throw request_error(errc::bad_message, "attach_sync must come before open_sync");
  }
  const std::string name(request.name.view());
  const bool counters = request.kind != sync_kind::lock;
  if (counters && request.parties > sync::kMaxParties) {
    throw request_error(errc::invalid_argument,
                        fmt::format("{} parties: at most {}", request.parties, sync::kMaxParties));
  }
  std::uint64_t id = 0;
  if (const auto known = names_.find(name); known != names_.end()) {
    id = known->second;
    const object& existing = objects_.at(id);
    if (existing.kind != request.kind) {
      throw request_error(errc::already_exists,
                          fmt::format("'{}' is a {}, not a {}", name, kind_name(existing.kind),
                                      kind_name(request.kind)));
    }
    if (existing.parties != request.parties) {
      throw request_error(errc::invalid_argument,
                          fmt::format("{} '{}' has {} parties, not {}", kind_name(existing.kind),
                                      name, existing.parties, request.parties));
    }
  } else {
    const std::uint32_t cell = take_cell();
    id = next_object_id_++;
    object created{id, name, request.kind, cell, request.parties, {}, {}};
    created.party_clients.assign(request.parties, 0);
    if (counters) cell_as<sync::counter_cell>(cell).parties = request.parties;
    objects_.emplace(id, std::move(created));
    names_.emplace(name, id);
  }
  object& found = objects_.at(id);
  proto::sync_open_reply reply{found.cell, 0, found.parties, 0};
  try {
    if (counters) reply.party = take_party(found, client, request.role);
  } catch (...) {
    forget_if_unused(id);
    throw;
  }
  ++found.openers[client];
  return reply;
}

void sync_registry::close(std::uint64_t client, const proto::sync_close_request& request) {
  const auto found = std::find_if(objects_.begin(), objects_.end(), [&](const auto& entry) {
    return entry.second.cell == request.cell && entry.second.openers.contains(client);
  });
  if (found == objects_.end()) {
    throw request_error(errc::not_found, fmt::format("no open object in cell {}", request.cell));
  }
  object& target = found->second;
  if (target.kind != sync_kind::lock) {
    if (request.party >= target.parties || target.party_clients[request.party] != client) {
      throw request_error(errc::invalid_argument,
                          fmt::format("party {} of '{}' is not yours", request.party, target.name));
    }
    target.party_clients[request.party] = 0;
    // Whoever waits for a round or an item this party will never reach would wait forever.
    if (!target.openers.empty()) break_party(target, request.party);
  }
  if (--target.openers[client] == 0) target.openers.erase(client);
  forget_if_unused(target.id);
}

void sync_registry::forget_if_unused(std::uint64_t object_id) noexcept {
  const auto found = objects_.find(object_id);
  if (found == objects_.end() || !found->second.openers.empty()) return;
  if (std::any_of(pending_.begin(), pending_.end(),
                  [&](const pending_reclaim& each) { return each.object_id == object_id; })) {
    return;
  }
  const object& gone = found->second;
  if (signal_page* page = gpu_page_of(gone)) {
    try {
      page->clear(gone.cell);
    } catch (const std::exception& error) {
      spdlog::error("{} '{}': clearing its signal cell: {}", kind_name(gone.kind), gone.name,
                    error.what());
    }
  }
  cell_taken_[gone.cell] = false;
  names_.erase(gone.name);
  objects_.erase(found);
}

signal_page* sync_registry::gpu_page_of(const object& found) {
  const std::uint32_t where =
      load(found.kind == sync_kind::lock ? cell_as<sync::lock_cell>(found.cell).domain
                                         : cell_as<sync::counter_cell>(found.cell).domain);
  const domain kind = sync::domain_of(where);
  if (kind != domain::stream && kind != domain::device) return nullptr;
  const auto page = signal_pages_.find(sync::device_of(where));
  return page == signal_pages_.end() ? nullptr : page->second.get();
}

const signal_page& sync_registry::signal_page_of(std::int32_t device) {
  if (const auto found = signal_pages_.find(device); found != signal_pages_.end()) {
    return *found->second;
  }
  if (!make_signal_page_) {
    throw request_error(errc::not_supported,
                        "stream-ordered and device locks and barriers need CUDA, which this "
                        "daemon does not have");
  }
  return *signal_pages_.emplace(device, make_signal_page_(device)).first->second;
}

bool sync_registry::holds_anything(std::uint64_t client) const noexcept {
  return std::any_of(objects_.begin(), objects_.end(),
                     [&](const auto& entry) { return entry.second.openers.contains(client); });
}

pid_t sync_registry::pid_of_slot(std::uint16_t slot) const noexcept {
  for (const auto& [id, attached] : clients_) {
    if (attached.slot == slot) return attached.pid;
  }
  return 0;
}

void sync_registry::drop_client(std::uint64_t client) noexcept {
  const auto found = clients_.find(client);
  if (found == clients_.end()) return;
  const std::uint16_t slot = found->second.slot;
  std::vector<std::uint64_t> touched;
  for (auto& [id, each] : objects_) {
    if (!each.openers.contains(client)) continue;
    touched.push_back(id);
    if (!reclaim(each, slot, client)) pending_.push_back({slot, id});
    each.openers.erase(client);
  }
  clients_.erase(found);
  for (const std::uint64_t id : touched) forget_if_unused(id);
  const bool slot_pending =
      std::any_of(pending_.begin(), pending_.end(),
                  [&](const pending_reclaim& each) { return each.slot == slot; });
  if (!slot_pending) slot_taken_[slot] = false;
}

bool sync_registry::settle() noexcept {
  std::vector<pending_reclaim> still;
  std::vector<std::uint64_t> finished;
  for (const pending_reclaim& each : pending_) {
    const auto found = objects_.find(each.object_id);
    if (found == objects_.end()) continue;
    if (reclaim(found->second, each.slot, 0)) {
      finished.push_back(each.object_id);
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
  for (const std::uint64_t id : finished) forget_if_unused(id);
  for (const std::uint16_t slot : freed) slot_taken_[slot] = false;
  return pending_.empty();
}

bool sync_registry::reclaim(object& found, std::uint16_t dead_slot,
                            std::uint64_t dead_client) noexcept {
  try {
    if (found.kind == sync_kind::lock) {
      auto& cell = cell_as<sync::lock_cell>(found.cell);
      switch (sync::domain_of(load(cell.domain))) {
        case domain::stream:
          return reclaim_stream_lock(found, dead_slot);
        case domain::device:
          reclaim_device_lock(found, dead_slot);
          return true;
        default:
          return sync::reclaim_lock(cell, dead_slot);
      }
    }
    for (std::uint32_t party = 0; dead_client != 0 && party < found.parties; ++party) {
      if (found.party_clients[party] != dead_client) continue;
      found.party_clients[party] = 0;
      spdlog::warn("{} '{}' broken: party {} died", kind_name(found.kind), found.name, party);
      break_party(found, party);
    }
    return true;
  } catch (const std::exception& error) {
    spdlog::error("{} '{}': cleaning up after a dead client: {}", kind_name(found.kind), found.name,
                  error.what());
    return true;
  }
}

bool sync_registry::reclaim_stream_lock(object& found, std::uint16_t dead_slot) {
  auto& cell = cell_as<sync::lock_cell>(found.cell);
  signal_page* page = gpu_page_of(found);
  const auto word = sync::lock_word::decode(
      std::atomic_ref<std::uint64_t>(cell.word).load(std::memory_order_acquire));
  // Its tickets, oldest first: their turns are passed on in that order on one stream.
  std::vector<std::uint16_t> tickets;
  for (auto& raw : cell.queue) {
    const auto entry = sync::queue_entry::decode(load(raw));
    if (entry.state == sync::queue_entry::empty || !entry.stream || entry.slot != dead_slot) {
      continue;
    }
    std::atomic_ref<std::uint32_t>(raw).store(0, std::memory_order_release);
    if (entry.ticket != word.next) tickets.push_back(entry.ticket);  // else never taken
  }
  std::sort(tickets.begin(), tickets.end(), [&](std::uint16_t a, std::uint16_t b) {
    return static_cast<std::uint16_t>(word.next - a) > static_cast<std::uint16_t>(word.next - b);
  });
  if (tickets.empty() || page == nullptr) return true;
  const std::uint32_t serving =
      page->read(found.cell, offsetof(sync::signal_cell, serving)) & 0xffffu;
  for (const std::uint16_t ticket : tickets) {
    if (static_cast<std::uint16_t>(serving - ticket) < 0x8000 && serving != ticket) continue;
    page->pass_turn(found.cell, offsetof(sync::signal_cell, serving), ticket,
                    static_cast<std::uint16_t>(ticket + 1));
    std::atomic_ref<std::uint32_t>(cell.owner_deaths).fetch_add(1, std::memory_order_relaxed);
  }
  spdlog::warn("lock '{}': passed on {} turn(s) of a dead client", found.name, tickets.size());
  return true;
}

void sync_registry::reclaim_device_lock(object& found, std::uint16_t dead_slot) {
  signal_page* page = gpu_page_of(found);
  if (page == nullptr) return;
  if (page->read(found.cell, offsetof(sync::signal_cell, device_lock)) != dead_slot) return;
  page->write(found.cell, offsetof(sync::signal_cell, owner_died), 1);
  page->write(found.cell, offsetof(sync::signal_cell, device_lock), 0);
  auto& cell = cell_as<sync::lock_cell>(found.cell);
  std::atomic_ref<std::uint32_t>(cell.owner_deaths).fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("lock '{}': released the device lock of a dead client", found.name);
}

void sync_registry::break_party(object& found, std::uint32_t party) {
  sync::break_counters(cell_as<sync::counter_cell>(found.cell));
  signal_page* page = gpu_page_of(found);
  if (page == nullptr) return;
  const std::size_t count_at = offsetof(sync::signal_cell, counts) + party * sizeof(std::uint32_t);
  const std::uint32_t count = page->read(found.cell, count_at);
  page->write(found.cell, offsetof(sync::signal_cell, broken), 1);
  page->write(found.cell, count_at, count + sync::kBrokenLead);
}

void sync_registry::reset(const proto::sync_reset_request& request) {
  const std::string name(request.name.view());
  const auto known = names_.find(name);
  if (known == names_.end()) {
    throw request_error(errc::not_found, fmt::format("no lock, barrier or channel '{}'", name));
  }
  object& found = objects_.at(known->second);
  signal_page* page = gpu_page_of(found);
  if (found.kind == sync_kind::lock) {
    auto& cell = cell_as<sync::lock_cell>(found.cell);
    const domain where = sync::domain_of(load(cell.domain));
    if (where == domain::stream) {
      throw request_error(errc::not_supported,
                          fmt::format("lock '{}' is stream-ordered: its turns pass on by "
                                      "themselves after a death and it has nothing to reset",
                                      name));
    }
    if (where == domain::device && page != nullptr) {
      page->write(found.cell, offsetof(sync::signal_cell, owner_died), 0);
      page->write(found.cell, offsetof(sync::signal_cell, device_lock), 0);
    }
    sync::reset_lock(cell);
    spdlog::info("lock '{}' reset by an operator", name);
    return;
  }
  std::uint32_t parties = request.parties;
  std::uint32_t highest_taken = 0;
  for (std::uint32_t party = 0; party < found.parties; ++party) {
    if (found.party_clients[party] != 0) highest_taken = party + 1;
  }
  if (parties == 0) parties = highest_taken;
  if (parties < highest_taken || parties > sync::kMaxParties ||
      (found.kind == sync_kind::channel && parties < 2)) {
    throw request_error(errc::invalid_argument,
                        fmt::format("{} '{}': {} parties cannot hold the {} attached",
                                    kind_name(found.kind), name, parties, highest_taken));
  }
  found.parties = parties;
  found.party_clients.resize(parties, 0);
  if (page != nullptr) page->clear(found.cell);
  sync::reset_counters(cell_as<sync::counter_cell>(found.cell), parties);
  spdlog::info("{} '{}' reset by an operator: {} parties", kind_name(found.kind), name, parties);
}

proto::sync_list_reply sync_registry::list(std::uint64_t after_id) const {
  proto::sync_list_reply reply;
  for (auto it = objects_.upper_bound(after_id); it != objects_.end(); ++it) {
    if (reply.records.size() == proto::sync_list_reply::kMaxRecords) {
      reply.head.more = 1;
      break;
    }
    const object& each = it->second;
    proto::sync_record record{};
    record.sync_id = each.id;
    record.kind = each.kind;
    record.cell = each.cell;
    record.parties = each.parties;
    (void)proto::make_wire_name(each.name, record.name);
    if (each.kind == sync_kind::lock) {
      const auto& cell = cell_as<sync::lock_cell>(each.cell);
      const auto word = sync::lock_word::decode(
          std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(cell.word))
              .load(std::memory_order_acquire));
      record.domain = load(cell.domain);
      record.attached = static_cast<std::uint32_t>(each.openers.size());
      record.flags = word.flags;
      record.owner_pid = static_cast<std::uint32_t>(pid_of_slot(word.owner));
      record.queued = word.free() ? 0 : word.queued() - 1u;
      record.owner_deaths = load(cell.owner_deaths);
      record.epoch = word.epoch;
    } else {
      const auto& cell = cell_as<sync::counter_cell>(each.cell);
      record.domain = load(cell.domain);
      record.attached = static_cast<std::uint32_t>(
          std::count_if(each.party_clients.begin(), each.party_clients.end(),
                        [](std::uint64_t client) { return client != 0; }));
      record.flags = load(cell.state);
      record.epoch = load(cell.epoch);
    }
    reply.records.push_back(record);
  }
  reply.head.count = static_cast<std::uint32_t>(reply.records.size());
  return reply;
}

}  // namespace gpumem::daemon
