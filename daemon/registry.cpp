#include "registry.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "memory/mps_status.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;

namespace {
std::uint64_t milliseconds_since(registry::clock::time_point then) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(registry::clock::now() - then).count());
}

proto::wire_name to_wire(const std::string& text) {
  proto::wire_name name{};
  (void)proto::make_wire_name(text, name);  // every stored name was checked on the way in
  return name;
}

std::string device_text(std::int32_t device) {
  return device == proto::kHostDevice ? "host" : "cuda:" + std::to_string(device);
}
}  // namespace

registry::registry(const daemon_config& config, std::vector<std::unique_ptr<pool>> pools,
                   reservation_maker make_reservation, signal_page_maker make_signal_page)
    : open_across_users_(config.open_across_users),
      pools_(std::move(pools)),
      make_reservation_(std::move(make_reservation)),
      sync_(std::move(make_signal_page)) {}

std::uint64_t registry::add_client(const credentials& who) {
  const std::uint64_t id = next_client_id_++;
  clients_.emplace(id, client_entry{who, {}, clock::now(), {}, {}});
  return id;
}

void registry::set_label(std::uint64_t client_id, std::string label) {
  client(client_id).label = std::move(label);
}

void registry::remove_client(std::uint64_t client_id) noexcept {
  const auto found = clients_.find(client_id);
  if (found == clients_.end()) return;
  sync_.drop_client(client_id);
  auto held = std::move(found->second.held);
  found->second.held.clear();
  for (const auto& [alloc_id, references] : held) drop_holder(client_id, alloc_id);
  auto reserved = std::move(found->second.reservations);
  found->second.reservations.clear();
  for (const auto& [id, references] : reserved) drop_reservation_holder(client_id, id);
  clients_.erase(found);
}

registry::client_entry& registry::client(std::uint64_t id) {
  const auto found = clients_.find(id);
  if (found == clients_.end()) throw request_error(errc::internal, "unknown client");
  return found->second;
}

pool& registry::choose_pool(const proto::allocate_request& request) {
  const auto pool_name = request.pool.view();
  for (const auto& candidate : pools_) {
    if (pool_name.empty() ? candidate->config().device == request.device
                          : candidate->config().name == pool_name) {
      if (candidate->config().device != request.device) {
        throw request_error(
            errc::invalid_argument,
            fmt::format("pool '{}' is on {}, not on {}", pool_name,
                        device_text(candidate->config().device), device_text(request.device)));
      }
      return *candidate;
    }
  }
  if (!pool_name.empty()) {
    throw request_error(errc::not_found, fmt::format("no pool named '{}'", pool_name));
  }
  throw request_error(errc::no_such_device,
                      fmt::format("no pool on {}", device_text(request.device)));
}

proto::allocation_reply registry::allocate(std::uint64_t client_id,
                                           const proto::allocate_request& request) {
  client_entry& owner = client(client_id);
  std::string name(request.name.view());
  if (!name.empty() && names_.contains(name)) {
    throw request_error(errc::already_exists,
                        fmt::format("an allocation named '{}' already exists", name));
  }
  pool& home = choose_pool(request);
  const placement where = home.allocate(request.size);
  const std::uint64_t id = next_alloc_id_++;
  allocation entry{&home, where, request.size, client_id, owner.who.uid, name};
  proto::allocation_reply reply;
  try {
    reply = reply_for(id, entry, proto::access_mode::read_write);
  } catch (...) {
    home.free(where, request.size);
    throw;
  }
  allocations_.emplace(id, std::move(entry));
  if (!name.empty()) names_.emplace(std::move(name), id);
  owner.held.emplace(id, 1);
  return reply;
}

proto::allocation_reply registry::open(std::uint64_t client_id,
                                       const proto::open_request& request) {
  client_entry& opener = client(client_id);
  const auto name = request.name.view();
  const auto found = names_.find(std::string(name));
  if (found == names_.end()) {
    throw request_error(errc::not_found, fmt::format("no allocation named '{}'", name));
  }
  allocation& entry = allocations_.at(found->second);
  check_may_open(opener, entry.owner_uid, name);
  auto [reference, first] = opener.held.try_emplace(found->second, 0);
  ++reference->second;
  if (first) ++entry.holder_count;
  return reply_for(found->second, entry, request.access);
}

void registry::release(std::uint64_t client_id, const proto::release_request& request) {
  client_entry& holder = client(client_id);
  const std::uint64_t alloc_id = request.alloc_id;
  const auto held = holder.held.find(alloc_id);
  if (held == holder.held.end()) {
    throw request_error(errc::not_found,
                        fmt::format("this client holds no allocation {}", alloc_id));
  }
  // Every reference's release event is waited for: the references may have been used on
  // different streams of the holder.
  const allocation& entry = allocations_.at(alloc_id);
  entry.home->holder_released(entry.where, request);
  if (--held->second > 0) return;
  holder.held.erase(held);
  drop_holder(client_id, alloc_id);
}

void registry::drop_holder(std::uint64_t client_id, std::uint64_t alloc_id) noexcept {
  const auto found = allocations_.find(alloc_id);
  if (found == allocations_.end()) return;
  allocation& entry = found->second;
  if (entry.owner == client_id) entry.owner = 0;
  if (--entry.holder_count > 0) return;
  entry.home->free(entry.where, entry.size);
  if (!entry.name.empty()) names_.erase(entry.name);
  allocations_.erase(found);
}

void registry::check_may_open(const client_entry& opener, uid_t owner_uid,
                              std::string_view name) const {
  if (!open_across_users_ && opener.who.uid != 0 && opener.who.uid != owner_uid) {
    throw request_error(errc::permission_denied,
                        fmt::format("'{}' belongs to uid {}; the daemon is not set to "
                                    "open_across_users",
                                    name, owner_uid));
  }
}

proto::reservation_reply registry::reply_for(std::uint64_t id, const reservation_entry& entry,
                                             proto::access_mode access) {
  return {id,
          entry.backing->max_size(),
          entry.backing->committed(),
          entry.backing->chunk_size(),
          entry.backing->device(),
          access};
}

proto::reservation_reply registry::reserve(std::uint64_t client_id,
                                           const proto::reserve_request& request) {
  client_entry& owner = client(client_id);
  if (!make_reservation_) {
    throw request_error(errc::not_supported,
                        "reservations need the CUDA backend, unavailable here");
  }
  std::string name(request.name.view());
  if (!name.empty() && reservation_names_.contains(name)) {
    throw request_error(errc::already_exists,
                        fmt::format("a reservation named '{}' already exists", name));
  }
  std::unique_ptr<reservation> backing = make_reservation_(request.device, request.max_size);
  const std::uint64_t chunk = backing->chunk_size();
  backing->resize((request.initial_size + chunk - 1) / chunk);
  const std::uint64_t id = next_reservation_id_++;
  auto& entry =
      reservations_
          .emplace(id, reservation_entry{std::move(backing), client_id, owner.who.uid, name})
          .first->second;
  if (!name.empty()) reservation_names_.emplace(std::move(name), id);
  owner.reservations.emplace(id, 1);
  return reply_for(id, entry, proto::access_mode::read_write);
}

proto::reservation_reply registry::open_reservation(std::uint64_t client_id,
                                                    const proto::open_request& request) {
  client_entry& opener = client(client_id);
  const auto name = request.name.view();
  const auto found = reservation_names_.find(std::string(name));
  if (found == reservation_names_.end()) {
    throw request_error(errc::not_found, fmt::format("no reservation named '{}'", name));
  }
  reservation_entry& entry = reservations_.at(found->second);
  check_may_open(opener, entry.owner_uid, name);
  auto [reference, first] = opener.reservations.try_emplace(found->second, 0);
  ++reference->second;
  if (first) ++entry.holder_count;
  return reply_for(found->second, entry, request.access);
}

const registry::reservation_entry& registry::held_reservation(std::uint64_t client_id,
                                                              std::uint64_t reservation_id) const {
  const auto holder = clients_.find(client_id);
  if (holder == clients_.end() || !holder->second.reservations.contains(reservation_id)) {
    throw request_error(errc::not_found,
                        fmt::format("this client holds no reservation {}", reservation_id));
  }
  return reservations_.at(reservation_id);
}

proto::reservation_reply registry::resize_reservation(std::uint64_t client_id,
                                                      const proto::resize_request& request) {
  const reservation_entry& entry = held_reservation(client_id, request.reservation_id);
  if (entry.owner != client_id) {
    throw request_error(
        errc::permission_denied,
        fmt::format("only the owner resizes reservation {}", request.reservation_id));
  }
  const std::uint64_t chunk = entry.backing->chunk_size();
  if (request.committed > entry.backing->max_size()) {
    throw request_error(errc::invalid_argument,
                        fmt::format("{} bytes exceed reservation {}'s {}", request.committed,
                                    request.reservation_id, entry.backing->max_size()));
  }
  entry.backing->resize((request.committed + chunk - 1) / chunk);
  return reply_for(request.reservation_id, entry, proto::access_mode::read_write);
}

proto::chunks_reply registry::chunks(std::uint64_t client_id, const proto::chunks_request& request,
                                     std::vector<int>& fds) const {
  const reservation& backing = *held_reservation(client_id, request.reservation_id).backing;
  proto::chunks_reply reply;
  reply.head.committed_chunks = backing.chunk_count();
  for (std::size_t index = request.first; index < backing.chunk_count(); ++index) {
    if (reply.records.size() == proto::kMaxFdsPerMessage) {
      reply.head.more = 1;
      break;
    }
    const reservation::chunk each = backing.chunk_at(index);
    reply.records.push_back({each.id, index});
    fds.push_back(each.fd);
  }
  reply.head.count = static_cast<std::uint32_t>(reply.records.size());
  return reply;
}

void registry::release_reservation(std::uint64_t client_id, std::uint64_t reservation_id) {
  held_reservation(client_id, reservation_id);
  client_entry& holder = client(client_id);
  if (--holder.reservations.at(reservation_id) > 0) return;
  holder.reservations.erase(reservation_id);
  drop_reservation_holder(client_id, reservation_id);
}

void registry::drop_reservation_holder(std::uint64_t client_id,
                                       std::uint64_t reservation_id) noexcept {
  const auto found = reservations_.find(reservation_id);
  if (found == reservations_.end()) return;
  reservation_entry& entry = found->second;
  if (entry.owner == client_id) entry.owner = 0;
  if (--entry.holder_count > 0) return;
  if (!entry.name.empty()) reservation_names_.erase(entry.name);
  reservations_.erase(found);
}

const pool& registry::find_pool(std::uint32_t pool_id) const {
  if (pool_id >= pools_.size()) {
    throw request_error(errc::not_found, fmt::format("no pool with id {}", pool_id));
  }
  return *pools_[pool_id];
}

proto::allocation_reply registry::reply_for(std::uint64_t id, const allocation& entry,
                                            proto::access_mode access) {
  proto::allocation_reply reply{};
  reply.alloc_id = id;
  reply.size = entry.size;
  reply.pool_id = entry.home->id();
  reply.access = access;
  entry.home->describe_grant(entry.where, reply);
  return reply;
}

pid_t registry::pid_of(std::uint64_t client_id) const {
  const auto found = clients_.find(client_id);
  return found == clients_.end() ? 0 : found->second.who.pid;
}

bool registry::holds_process_state(std::uint64_t client_id) const {
  const auto found = clients_.find(client_id);
  if (found == clients_.end()) return false;
  if (sync_.holds_anything(client_id)) return true;
  if (!found->second.reservations.empty()) return true;
  for (const auto& [alloc_id, references] : found->second.held) {
    if (allocations_.at(alloc_id).home->is_device_memory()) return true;
  }
  return false;
}

std::uint32_t registry::features() const noexcept {
  for (const auto& candidate : pools_) {
    if (candidate->is_device_memory()) {
      return proto::kFeatureCuda | (mps_active() ? proto::kFeatureMps : 0u);
    }
  }
  return 0;
}

proto::stats_reply registry::stats() const {
  proto::stats_reply reply;
  reply.head.count = static_cast<std::uint32_t>(pools_.size());
  reply.head.client_count = static_cast<std::uint32_t>(clients_.size());
  reply.head.uptime_ms = milliseconds_since(started_);
  reply.head.daemon_pid = static_cast<std::uint32_t>(::getpid());
  reply.head.allocation_count = allocations_.size();
  reply.head.features = features();
  for (const auto& candidate : pools_) {
    const auto& usage = candidate->usage();
    const driver_usage driver = candidate->driver_counters();
    reply.head.ipc_events_live += candidate->ipc_events_live();
    reply.records.push_back({to_wire(candidate->config().name), candidate->id(),
                             candidate->config().device, candidate->config().size,
                             usage.bytes_in_use, usage.bytes_reserved, usage.bytes_in_use_high,
                             usage.allocations, driver.reserved_current, driver.reserved_high,
                             driver.used_current, driver.used_high});
  }
  return reply;
}

proto::client_list_reply registry::list_clients(std::uint64_t after_id) const {
  proto::client_list_reply reply;
  for (auto it = clients_.upper_bound(after_id); it != clients_.end(); ++it) {
    if (reply.records.size() == kPageSize) {
      reply.head.more = 1;
      break;
    }
    const auto& [id, entry] = *it;
    proto::client_record record{};
    record.client_id = id;
    record.pid = static_cast<std::uint32_t>(entry.who.pid);
    record.uid = entry.who.uid;
    record.gid = entry.who.gid;
    for (const auto& [alloc_id, references] : entry.held) {
      const auto& held = allocations_.at(alloc_id);
      if (held.owner == id) {
        ++record.allocations_owned;
        record.bytes_owned += held.size;
      } else {
        ++record.allocations_opened;
      }
    }
    record.connected_ms = milliseconds_since(entry.connected);
    record.label = to_wire(entry.label);
    reply.records.push_back(record);
  }
  reply.head.count = static_cast<std::uint32_t>(reply.records.size());
  return reply;
}

proto::allocation_list_reply registry::list_allocations(std::uint64_t after_id) const {
  proto::allocation_list_reply reply;
  for (auto it = allocations_.upper_bound(after_id); it != allocations_.end(); ++it) {
    if (reply.records.size() == kPageSize) {
      reply.head.more = 1;
      break;
    }
    const auto& [id, entry] = *it;
    reply.records.push_back(
        {id, entry.size, entry.owner, entry.home->id(), entry.holder_count, to_wire(entry.name)});
  }
  reply.head.count = static_cast<std::uint32_t>(reply.records.size());
  return reply;
}

proto::reservation_list_reply registry::list_reservations(std::uint64_t after_id) const {
  proto::reservation_list_reply reply;
  for (auto it = reservations_.upper_bound(after_id); it != reservations_.end(); ++it) {
    if (reply.records.size() == kPageSize) {
      reply.head.more = 1;
      break;
    }
    const auto& [id, entry] = *it;
    reply.records.push_back({id, entry.backing->max_size(), entry.backing->committed(), entry.owner,
                             entry.holder_count, entry.backing->device(), to_wire(entry.name)});
  }
  reply.head.count = static_cast<std::uint32_t>(reply.records.size());
  return reply;
}

}  // namespace gpumem::daemon
