#include "memory/memory_book.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "memory/mps_status.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;

namespace {

std::string device_text(std::int32_t device) {
  return device == proto::kHostDevice ? "host" : "cuda:" + std::to_string(device);
}

}  // namespace

memory_book::memory_book(ledger& rows, const access_policy& access, const quota_policy& quotas,
                         descriptor_budget& descriptors, const daemon_config& config,
                         pool_maker make_pool)
    : daemon_uid_(::geteuid()),
      rows_(rows),
      access_(access),
      quotas_(quotas),
      descriptors_(descriptors),
      make_pool_(std::move(make_pool)) {
  // Room for pools a previous daemon had that the configuration no longer names (adopt_pool):
  // instances point into families_, so it must never move.
  families_.reserve(config.pools.size() + kUnconfiguredPools);
  for (const pool_config& each : config.pools) families_.emplace_back(each);
}

void memory_book::open_pools() {
  for (pool_family& family : families_) {
    if (family.configured) open_family(family);
    for (pool* each : std::vector<pool*>(family.retired)) release_if_retired_and_empty(*each);
  }
}

void memory_book::open_family(pool_family& family) {
  const access_class daemons = access_class::for_memory(daemon_uid_, ::getegid(), 0600);
  try {
    instance(family, daemons, 0);
  } catch (const std::exception& error) {
    throw config_error("pool '" + family.config.name + "': " + error.what());
  }
}

void memory_book::add_pool(const pool_config& config) {
  // A pool that only the kept state still named, configured again: as it was, it takes
  // allocations again; otherwise two families of one name would share out one name's size twice.
  for (pool_family& family : families_) {
    if (family.configured || family.config.name != config.name) continue;
    if (!listed(family)) {  // it holds nothing any more: configured anew
      family.config = config;
      family.room = std::make_unique<family_room>(config.size);
    } else if (family.config != config) {
      throw config_error("pool '" + config.name +
                         "': a pool of that name with other settings, from before the last "
                         "restart, still holds memory; added at the next restart");
    }
    open_family(family);
    family.configured = true;
    return;
  }
  if (families_.size() == families_.capacity()) {
    throw config_error("pool '" + config.name + "': no room for more pools until gpumemd restarts");
  }
  families_.emplace_back(config);
  try {
    open_family(families_.back());
  } catch (...) {
    families_.pop_back();
    throw;
  }
}

memory_book::pool_family& memory_book::family_named(const pool_config& config) {
  for (pool_family& family : families_) {
    if (family.config.name != config.name) continue;
    // Instances come in the order of their ids, the later made under the later configuration:
    // a pool no longer configured keeps the settings it had last. Its allocations are adopted
    // after its instances, so its room is still empty.
    if (!family.configured && family.config != config) {
      family.config = config;
      family.room = std::make_unique<family_room>(config.size);
    }
    return family;
  }
  spdlog::warn(
      "pool '{}' is no longer configured: it serves what a previous gpumemd put in it and takes "
      "no new allocations",
      config.name);
  if (families_.size() == families_.capacity()) {
    throw request_error(errc::internal, "too many pools are no longer configured");
  }
  families_.emplace_back(config).configured = false;
  return families_.back();
}

void memory_book::adopt_pool(std::unique_ptr<pool> adopted, const access_class& tenant) {
  pool_family& family = family_named(adopted->config());
  const std::uint32_t id = adopted->id();
  if (pools_.size() <= id) {
    room_for_notes(id + 1);
    pools_.resize(id + 1);
    pool_owner_.resize(id + 1, {0, tenant});
  }
  pool_owner_[id] = {static_cast<std::size_t>(&family - families_.data()), tenant};
  // Only an instance made as the pool is configured now takes allocations (a host pool's size
  // changed at the restart, or a record that names a configured pool with other settings).
  if (family.configured && adopted->config() == family.config && adopted->takes_allocations() &&
      !family.instances.contains(tenant)) {
    family.instances.emplace(tenant, adopted.get());
  } else {
    family.retired.push_back(adopted.get());
  }
  pools_[id] = std::move(adopted);
  rows_.touch_pool(id);
}

void memory_book::adopt_allocation(object_id id, std::uint32_t pool_id, const placement& where,
                                   const grant_details& grant) {
  const object_row* row = rows_.find(id);
  if (row == nullptr || pool_id >= pools_.size() || !pools_[pool_id]) {
    throw request_error(
        errc::internal,
        fmt::format("allocation {} lies in pool instance {}, which is gone", id, pool_id));
  }
  pool& home = *pools_[pool_id];
  home.adopt(where, row->bytes, grant);
  families_[pool_owner_[pool_id].first].room->allocated(row->bytes);
  allocations_.emplace(id, placed{&home, where});
}

void memory_book::reserve_pool_ids(std::uint32_t limit) {
  if (pools_.size() >= limit) return;
  room_for_notes(limit);
  pools_.resize(limit);
  pool_owner_.resize(limit, {0, access_class{}});
}

const pool* memory_book::pool_by_id(std::uint32_t pool_id) const noexcept {
  return pool_id < pools_.size() ? pools_[pool_id].get() : nullptr;
}

std::optional<std::pair<const pool*, placement>> memory_book::placement_of(object_id id) const {
  const auto found = allocations_.find(id);
  if (found == allocations_.end()) return std::nullopt;
  return std::pair<const pool*, placement>{found->second.home, found->second.where};
}

void memory_book::release_if_retired_and_empty(pool& instance) noexcept {
  if (instance.usage().allocations > 0) return;
  const std::uint32_t id = instance.id();
  auto& retired = families_[pool_owner_[id].first].retired;
  if (std::erase(retired, &instance) == 0) return;
  spdlog::info("pool '{}': instance {} from before the restart holds nothing any more: closed",
               instance.config().name, id);
  instance.settle_frees();  // its last free's pages go back now, not with the last client's fd
  pools_[id].reset();
  rows_.touch_pool(id);
}

memory_book::pool_family& memory_book::choose_family(const proto::allocate_request& request) {
  const auto pool_name = request.pool.view();
  bool no_longer_configured = false;
  for (auto& candidate : families_) {
    if (pool_name.empty() ? candidate.config.device == request.device
                          : candidate.config.name == pool_name) {
      if (!candidate.configured) {
        no_longer_configured = true;
        continue;
      }
      if (candidate.config.device != request.device) {
        throw request_error(
            errc::invalid_argument,
            fmt::format("pool '{}' is on {}, not on {}", pool_name,
                        device_text(candidate.config.device), device_text(request.device)));
      }
      return candidate;
    }
  }
  if (no_longer_configured && !pool_name.empty()) {
    throw request_error(errc::not_found,
                        fmt::format("pool '{}' is no longer configured: it serves what it held "
                                    "before gpumemd restarted and takes no new allocations",
                                    pool_name));
  }
  if (!pool_name.empty()) {
    throw request_error(errc::not_found, fmt::format("no pool named '{}'", pool_name));
  }
  throw request_error(errc::no_such_device,
                      fmt::format("no pool on {}", device_text(request.device)));
}

pool& memory_book::instance(pool_family& family, const access_class& tenant, std::uint64_t size) {
  const family_room& room = *family.room;
  if (size > room.unallocated()) {
    throw request_error(errc::out_of_memory,
                        fmt::format("pool '{}' cannot fit {} bytes: {} of {} bytes in use by all "
                                    "its tenants",
                                    family.config.name, size, room.bytes_in_use(), room.size()));
  }
  if (const auto found = family.instances.find(tenant); found != family.instances.end()) {
    return *found->second;
  }
  const auto id = static_cast<std::uint32_t>(pools_.size());
  // Room first, so that nothing below the making can fail: an instance left in one index and
  // not the others would outlive its family (add_pool drops a family that failed to open).
  pools_.reserve(pools_.size() + 1);
  pool_owner_.reserve(pool_owner_.size() + 1);
  room_for_notes(pools_.size() + 1);
  // The daemon's own instance of a pool (open_family) draws on the room held back for it.
  if (tenant != access_class::for_memory(daemon_uid_, ::getegid(), 0600)) {
    descriptors_.check(
        1, fmt::format("pool '{}' (an instance for uid {})", family.config.name, tenant.owner));
  }
  std::unique_ptr<pool> made;
  try {
    made = make_pool_(id, family.config, *family.room);
  } catch (const request_error&) {
    throw;
  } catch (const std::exception& error) {
    throw request_error(errc::internal,
                        fmt::format("making an instance of pool '{}' for uid {}: {}",
                                    family.config.name, tenant.owner, error.what()));
  }
  rows_.touch_pool(id);  // an id touched with no pool behind it is written down as none
  family.instances.emplace(tenant, made.get());
  pools_.push_back(std::move(made));
  pool_owner_.emplace_back(static_cast<std::size_t>(&family - families_.data()), tenant);
  return *pools_.back();
}

proto::allocation_reply memory_book::allocate(client_id client,
                                              const proto::allocate_request& request) {
  std::string name(request.name.view());
  if (!name.empty() && rows_.find_name(object_family::allocation, name)) {
    throw request_error(errc::already_exists,
                        fmt::format("an allocation named '{}' already exists", name));
  }
  pool_family& family = choose_family(request);
  quotas_.check(rows_, client, charge::memory(request.device, request.size));
  const credentials& who = rows_.client(client).who;
  const mode_t mode = access_.mode_for(request.flags);
  pool& home = instance(family, access_class::for_memory(who.uid, who.gid, mode), request.size);
  make_room(family, home, request.size);
  // Counted before the pool allocates: the spare blocks it asks for once the reply is out fit
  // beside this one.
  family.room->allocated(request.size);
  std::optional<placement> where;
  try {
    where = home.allocate(request.size);
  } catch (...) {
    family.room->freed(request.size);
    throw;
  }
  note_once(deferred_work_, home.id());
  object_id id = 0;
  try {
    id = rows_.add(client,
                   {object_kind::allocation, std::move(name), request.size, request.device, mode});
    allocations_.emplace(id, placed{&home, *where});
    return grant(client, id, *rows_.find(id), proto::access_mode::read_write);
  } catch (...) {
    allocations_.erase(id);
    rows_.erase(id);
    home.free(*where, request.size);
    family.room->freed(request.size);
    note_once(unsettled_frees_, home.id());
    throw;
  }
}

void memory_book::make_room(const pool_family& family, pool& home, std::uint64_t size) {
  // A block home keeps of this size turns from spare into allocation and needs no more room.
  // Otherwise only home's own spares give way: their memory goes back to home's CUDA pool,
  // where this allocation reuses it. Another tenant's would stay in that tenant's pool (IPC
  // pools give exported memory back to the device neither on a free nor on a trim), so
  // dropping them would cost that tenant its next spare and give this allocation nothing.
  if (size > family.room->free() && !home.has_spare(size)) home.drop_spares();
}

void memory_book::note_once(std::vector<std::uint32_t>& ids, std::uint32_t id) noexcept {
  // Never allocates: the lists have room for every pool id (room_for_notes()).
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

void memory_book::room_for_notes(std::size_t pool_ids) {
  deferred_work_.reserve(pool_ids);
  unsettled_frees_.reserve(pool_ids);
}

void memory_book::run_noted(std::vector<std::uint32_t>& ids,
                            void (pool::*work)() noexcept) noexcept {
  for (const std::uint32_t id : ids) {
    if (id < pools_.size() && pools_[id]) (pools_[id].get()->*work)();
  }
  ids.clear();
}

void memory_book::start_deferred_work() noexcept {
  run_noted(deferred_work_, &pool::start_deferred_work);
}

void memory_book::settle_frees() noexcept {
  run_noted(unsettled_frees_, &pool::settle_frees);
}

void memory_book::zero_free_space() {
  for (const auto& each : pools_) {
    if (each) each->zero_free_space();
  }
}

proto::allocation_reply memory_book::open(client_id client, const proto::open_request& request) {
  const object_id id = open_named(rows_, access_, client, object_family::allocation, request);
  return grant(client, id, *rows_.find(id), request.access);
}

void memory_book::release(client_id client, const proto::release_request& request) {
  const object_row& row = rows_.held(client, request.alloc_id, object_family::allocation);
  // Every reference's release event is waited for: the references may have been used on
  // different streams of the holder.
  const placed& backing = allocations_.at(request.alloc_id);
  std::optional<ipc_handle> released_event;
  if ((request.flags & proto::kReleaseHasEvent) != 0) {
    static_assert(sizeof(request.released_event) == sizeof(ipc_handle));
    std::memcpy(released_event.emplace().data(), request.released_event, sizeof(ipc_handle));
  }
  if (released_event) {
    // Noted first: a pool that keeps the event must hear of the client's end.
    std::vector<std::uint32_t>& pools = release_pools_[client];
    if (std::find(pools.begin(), pools.end(), backing.home->id()) == pools.end()) {
      pools.push_back(backing.home->id());
    }
  }
  backing.home->holder_released(client, backing.where, released_event);
  if (rows_.drop_reference(request.alloc_id, client)) let_go(request.alloc_id, row);
}

void memory_book::forget_holder(client_id client) noexcept {
  const auto found = release_pools_.find(client);
  if (found == release_pools_.end()) return;
  for (const std::uint32_t id : found->second) {
    if (id < pools_.size() && pools_[id]) pools_[id]->forget_holder(client);
  }
  release_pools_.erase(found);
}

void memory_book::let_go(object_id id, const object_row& row) noexcept {
  if (!row.holders.empty()) return;
  if (const auto found = allocations_.find(id); found != allocations_.end()) {
    pool& home = *found->second.home;
    home.free(found->second.where, row.bytes);
    families_[pool_owner_[home.id()].first].room->freed(row.bytes);
    note_once(unsettled_frees_, home.id());
    allocations_.erase(found);
    release_if_retired_and_empty(home);
  }
  rows_.erase(id);
}

bool memory_book::needs_process_exit(object_id id, const object_row& row) const noexcept {
  if (row.kind == object_kind::reservation) return true;
  const auto found = allocations_.find(id);
  return found != allocations_.end() && found->second.home->is_device_memory();
}

std::pair<const pool*, int> memory_book::pool_for(client_id client, std::uint32_t pool_id) const {
  const auto refuse = [&] {
    return request_error(errc::not_found,
                         fmt::format("no pool with id {} that this client may reach", pool_id));
  };
  if (pool_id >= pools_.size() || !pools_[pool_id]) throw refuse();
  const access_class& tenant = pool_owner_[pool_id].second;
  // The rights of a client on every object of the instance are the same: ask for one of them.
  const object_row sample = tenant.sample();
  const credentials& who = rows_.client(client).who;
  const pool& found = *pools_[pool_id];
  if (access_.may_open(who, sample, wanted_access::read_write)) {
    return {&found, found.shareable_fd()};
  }
  if (access_.may_open(who, sample, wanted_access::read)) return {&found, found.read_only_fd()};
  throw refuse();
}

bool memory_book::shares_events(client_id client) const {
  return rows_.client(client).who.uid == daemon_uid_;
}

proto::allocation_reply memory_book::grant(client_id client, object_id id, const object_row& row,
                                           proto::access_mode access) const {
  const placed& backing = allocations_.at(id);
  if (backing.home->is_device_memory() && !shares_events(client)) {
    backing.home->finish_allocations();
  }
  proto::allocation_reply reply{};
  reply.alloc_id = id;
  reply.size = row.bytes;
  reply.pool_id = backing.home->id();
  reply.access = access;
  const grant_details details = backing.home->grant_of(backing.where);
  reply.offset = details.offset;
  static_assert(sizeof(reply.pointer_export) == sizeof(details.pointer_export));
  std::memcpy(reply.pointer_export, details.pointer_export.data(), sizeof(reply.pointer_export));
  return reply;
}

std::uint32_t memory_book::features() const noexcept {
  for (const auto& candidate : pools_) {
    if (candidate && candidate->is_device_memory()) {
      return proto::kFeatureCuda | (mps_active() ? proto::kFeatureMps : 0u);
    }
  }
  return 0;
}

proto::stats_reply memory_book::stats() const {
  proto::stats_reply reply;
  reply.head.daemon_pid = static_cast<std::uint32_t>(::getpid());
  reply.head.allocation_count = allocations_.size();
  reply.head.features = features();
  for (const pool_family& family : families_) {
    if (!listed(family)) continue;
    // A configured pool's line is the sum of its instances; its id is its first instance's.
    proto::pool_stats record{};
    record.name = to_wire(family.config.name);
    record.pool_id = static_cast<std::uint32_t>(pools_.size());
    record.device = family.config.device;
    record.size_limit = family.config.size;
    std::vector<const pool*> instances(family.retired.begin(), family.retired.end());
    for (const auto& [tenant, each] : family.instances) instances.push_back(each);
    for (const pool* each : instances) {
      const pool_usage& usage = each->usage();
      const driver_usage driver = each->driver_counters();
      record.pool_id = std::min(record.pool_id, each->id());
      record.bytes_in_use += usage.bytes_in_use;
      record.bytes_reserved += usage.bytes_reserved;
      record.bytes_in_use_high += usage.bytes_in_use_high;
      record.allocations += usage.allocations;
      record.driver_reserved_current += driver.reserved_current;
      record.driver_reserved_high += driver.reserved_high;
      record.driver_used_current += driver.used_current;
      record.driver_used_high += driver.used_high;
      reply.head.ipc_events_live += each->ipc_events_live();
    }
    reply.records.push_back(record);
  }
  reply.head.count = static_cast<std::uint32_t>(reply.records.size());
  return reply;
}

std::vector<std::pair<const pool_config*, spare_use>> memory_book::spares() const {
  std::vector<std::pair<const pool_config*, spare_use>> found;
  for (const pool_family& family : families_) {
    if (!listed(family)) continue;
    spare_use sum{.bytes = family.room->spare_bytes()};
    for (const auto& [tenant, each] : family.instances) {
      const spare_use use = each->spares();
      sum.ready_bytes += use.ready_bytes;
      sum.served += use.served;
      sum.missed += use.missed;
      sum.made += use.made;
      sum.reused += use.reused;
    }
    found.emplace_back(&family.config, sum);
  }
  return found;
}

proto::allocation_list_reply memory_book::list_allocations(client_id asker, object_id after) const {
  const credentials& who = rows_.client(asker).who;
  return rows_.page<proto::allocation_record>(
      object_family::allocation, after, kPageSize,
      [&](const object_row& row) { return access_.may_see(who, row); },
      [&](object_id id, const object_row& row) {
        return proto::allocation_record{id,
                                        row.bytes,
                                        row.owner,
                                        allocations_.at(id).home->id(),
                                        static_cast<std::uint32_t>(row.holders.size()),
                                        to_wire(row.name)};
      });
}

}  // namespace gpumem::daemon
