#include "memory/memory_book.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>

#include "memory/mps_status.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;

namespace {
proto::wire_name to_wire(const std::string& text) {
  proto::wire_name name{};
  (void)proto::make_wire_name(text, name);  // every stored name was checked on the way in
  return name;
}

std::string device_text(std::int32_t device) {
  return device == proto::kHostDevice ? "host" : "cuda:" + std::to_string(device);
}

std::uint64_t whole_chunks(std::uint64_t bytes, std::uint64_t chunk) {
  return (bytes + chunk - 1) / chunk;
}
}  // namespace

memory_book::memory_book(ledger& rows, const daemon_config& config,
                         std::vector<std::unique_ptr<pool>> pools,
                         reservation_maker make_reservation)
    : rows_(rows),
      open_across_users_(config.open_across_users),
      pools_(std::move(pools)),
      make_reservation_(std::move(make_reservation)) {}

pool& memory_book::choose_pool(const proto::allocate_request& request) {
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

object_id memory_book::open_named(client_id client, object_family family, std::string_view name) {
  const auto found = rows_.find_name(family, name);
  if (!found) {
    throw request_error(errc::not_found,
                        fmt::format("no {} named '{}'", family_name(family), name));
  }
  const object_row& row = *rows_.find(*found);
  const uid_t opener = rows_.client(client).who.uid;
  if (!open_across_users_ && opener != 0 && opener != row.owner_uid) {
    throw request_error(errc::permission_denied,
                        fmt::format("'{}' belongs to uid {}; the daemon is not set to "
                                    "open_across_users",
                                    name, row.owner_uid));
  }
  rows_.hold(*found, client);
  return *found;
}

proto::allocation_reply memory_book::allocate(client_id client,
                                              const proto::allocate_request& request) {
  std::string name(request.name.view());
  if (!name.empty() && rows_.find_name(object_family::allocation, name)) {
    throw request_error(errc::already_exists,
                        fmt::format("an allocation named '{}' already exists", name));
  }
  pool& home = choose_pool(request);
  const placement where = home.allocate(request.size);
  object_id id = 0;
  try {
    id = rows_.add(object_kind::allocation, std::move(name), client, request.size);
    allocations_.emplace(id, placed{&home, where});
    return grant(id, *rows_.find(id), proto::access_mode::read_write);
  } catch (...) {
    allocations_.erase(id);
    rows_.erase(id);
    home.free(where, request.size);
    throw;
  }
}

proto::allocation_reply memory_book::open(client_id client, const proto::open_request& request) {
  const object_id id = open_named(client, object_family::allocation, request.name.view());
  return grant(id, *rows_.find(id), request.access);
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
  backing.home->holder_released(backing.where, released_event);
  if (rows_.drop_reference(request.alloc_id, client)) let_go(request.alloc_id, row);
}

proto::reservation_reply memory_book::reserve(client_id client,
                                              const proto::reserve_request& request) {
  if (!make_reservation_) {
    throw request_error(errc::not_supported,
                        "reservations need the CUDA backend, unavailable here");
  }
  std::string name(request.name.view());
  if (!name.empty() && rows_.find_name(object_family::reservation, name)) {
    throw request_error(errc::already_exists,
                        fmt::format("a reservation named '{}' already exists", name));
  }
  std::unique_ptr<reservation> backing = make_reservation_(request.device, request.max_size);
  backing->resize(whole_chunks(request.initial_size, backing->chunk_size()));
  const object_id id =
      rows_.add(object_kind::reservation, std::move(name), client, backing->committed());
  try {
    const reservation& made = *reservations_.emplace(id, std::move(backing)).first->second;
    return grant(id, made, proto::access_mode::read_write);
  } catch (...) {
    reservations_.erase(id);
    rows_.erase(id);
    throw;
  }
}

proto::reservation_reply memory_book::open_reservation(client_id client,
                                                       const proto::open_request& request) {
  const object_id id = open_named(client, object_family::reservation, request.name.view());
  return grant(id, *reservations_.at(id), request.access);
}

proto::reservation_reply memory_book::resize_reservation(client_id client,
                                                         const proto::resize_request& request) {
  object_row& row = rows_.held(client, request.reservation_id, object_family::reservation);
  if (row.owner != client) {
    throw request_error(
        errc::permission_denied,
        fmt::format("only the owner resizes reservation {}", request.reservation_id));
  }
  reservation& backing = *reservations_.at(request.reservation_id);
  if (request.committed > backing.max_size()) {
    throw request_error(errc::invalid_argument,
                        fmt::format("{} bytes exceed reservation {}'s {}", request.committed,
                                    request.reservation_id, backing.max_size()));
  }
  backing.resize(whole_chunks(request.committed, backing.chunk_size()));
  row.bytes = backing.committed();
  return grant(request.reservation_id, backing, proto::access_mode::read_write);
}

proto::chunks_reply memory_book::chunks(client_id client, const proto::chunks_request& request,
                                        std::vector<int>& fds) {
  rows_.held(client, request.reservation_id, object_family::reservation);
  const reservation& backing = *reservations_.at(request.reservation_id);
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

void memory_book::release_reservation(client_id client, object_id reservation_id) {
  const object_row& row = rows_.held(client, reservation_id, object_family::reservation);
  if (rows_.drop_reference(reservation_id, client)) let_go(reservation_id, row);
}

void memory_book::let_go(object_id id, const object_row& row) noexcept {
  if (!row.holders.empty()) return;
  if (row.kind == object_kind::allocation) {
    if (const auto found = allocations_.find(id); found != allocations_.end()) {
      found->second.home->free(found->second.where, row.bytes);
      allocations_.erase(found);
    }
  } else {
    reservations_.erase(id);
  }
  rows_.erase(id);
}

bool memory_book::needs_process_exit(object_id id, const object_row& row) const noexcept {
  if (row.kind == object_kind::reservation) return true;
  const auto found = allocations_.find(id);
  return found != allocations_.end() && found->second.home->is_device_memory();
}

const pool& memory_book::find_pool(std::uint32_t pool_id) const {
  if (pool_id >= pools_.size()) {
    throw request_error(errc::not_found, fmt::format("no pool with id {}", pool_id));
  }
  return *pools_[pool_id];
}

proto::allocation_reply memory_book::grant(object_id id, const object_row& row,
                                           proto::access_mode access) const {
  const placed& backing = allocations_.at(id);
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

proto::reservation_reply memory_book::grant(object_id id, const reservation& backing,
                                            proto::access_mode access) const {
  return {id,    backing.max_size(), backing.committed(), backing.chunk_size(), backing.device(),
          access};
}

std::uint32_t memory_book::features() const noexcept {
  for (const auto& candidate : pools_) {
    if (candidate->is_device_memory()) {
      return proto::kFeatureCuda | (mps_active() ? proto::kFeatureMps : 0u);
    }
  }
  return 0;
}

proto::stats_reply memory_book::stats() const {
  proto::stats_reply reply;
  reply.head.count = static_cast<std::uint32_t>(pools_.size());
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

proto::allocation_list_reply memory_book::list_allocations(object_id after) const {
  return rows_.page<proto::allocation_record>(
      object_family::allocation, after, kPageSize, [&](object_id id, const object_row& row) {
        return proto::allocation_record{id,
                                        row.bytes,
                                        row.owner,
                                        allocations_.at(id).home->id(),
                                        static_cast<std::uint32_t>(row.holders.size()),
                                        to_wire(row.name)};
      });
}

proto::reservation_list_reply memory_book::list_reservations(object_id after) const {
  return rows_.page<proto::reservation_record>(
      object_family::reservation, after, kPageSize, [&](object_id id, const object_row& row) {
        const reservation& backing = *reservations_.at(id);
        return proto::reservation_record{id,
                                         backing.max_size(),
                                         backing.committed(),
                                         row.owner,
                                         static_cast<std::uint32_t>(row.holders.size()),
                                         backing.device(),
                                         to_wire(row.name)};
      });
}

}  // namespace gpumem::daemon
