#include <utility>

#include "connection.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "gpumem/slab.hpp"

namespace gpumem {

using proto::message_type;

namespace {
proto::wire_name checked_name(std::string_view text, const char* what) {
  proto::wire_name name{};
  if (proto::make_wire_name(text, name)) {
    throw Error(errc::invalid_name, std::string(what) + " '" + std::string(text) +
                                        "' is not 1-63 characters of [A-Za-z0-9._:/@+-]");
  }
  return name;
}

template <class Record, class Info, class Convert>
std::vector<Info> list_all(detail::connection& connection, message_type type, Convert convert) {
  std::vector<Info> all;
  std::uint64_t after = 0;
  for (;;) {
    const auto page = connection.call<proto::list_payload<proto::list_head, Record>>(
        type, proto::list_request{after});
    for (const auto& record : page.records) all.push_back(convert(record));
    if (!page.head.more || page.records.empty()) return all;
    after = all.back().id;
  }
}
}  // namespace

Buffer::Buffer(Buffer&& other) noexcept
    : connection_(std::move(other.connection_)),
      data_(std::exchange(other.data_, nullptr)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      size_(std::exchange(other.size_, 0)),
      id_(std::exchange(other.id_, 0)),
      device_(other.device_),
      access_(other.access_),
      stream_(other.stream_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  Buffer taken(std::move(other));
  swap(taken);  // what *this held is released when `taken` goes
  return *this;
}

void Buffer::swap(Buffer& other) noexcept {
  std::swap(connection_, other.connection_);
  std::swap(data_, other.data_);
  std::swap(mapping_, other.mapping_);
  std::swap(mapping_size_, other.mapping_size_);
  std::swap(size_, other.size_);
  std::swap(id_, other.id_);
  std::swap(device_, other.device_);
  std::swap(access_, other.access_);
  std::swap(stream_, other.stream_);
}

Buffer::~Buffer() {
  try {
    release();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report; release() can
  }
}

void* Buffer::at(const SlabPiece& piece) const {
  if (piece.slab != id_ || piece.offset > size_ || piece.size > size_ - piece.offset) {
    throw Error(errc::invalid_argument, "piece (slab " + std::to_string(piece.slab) + ", offset " +
                                            std::to_string(piece.offset) + ", size " +
                                            std::to_string(piece.size) + ") is not within buffer " +
                                            std::to_string(id_));
  }
  return static_cast<char*>(data_) + piece.offset;
}

void Buffer::release() {
  release(stream_);
}

void Buffer::release(Stream last_use) {
  if (connection_) connection_->release(*this, last_use);
}

Client::Client(std::shared_ptr<detail::connection> connection)
    : connection_(std::move(connection)) {}

Client Client::connect(const ConnectOptions& options) {
  return Client(detail::connection::open(options));
}

Buffer Client::allocate(std::size_t bytes, const AllocateOptions& options) {
  if (bytes == 0) throw Error(errc::invalid_argument, "cannot allocate 0 bytes");
  if (options.device < kHost) {
    throw Error(errc::no_such_device,
                "device " + std::to_string(options.device) + " does not exist");
  }
  proto::allocate_request request{};
  request.size = bytes;
  request.device = options.device;
  if (!options.name.empty()) request.name = checked_name(options.name, "allocation name");
  if (!options.pool.empty()) request.pool = checked_name(options.pool, "pool name");
  return connection_->adopt(
      connection_->call<proto::allocation_reply>(message_type::allocate, request), options.stream);
}

Buffer Client::open(std::string_view name, const OpenOptions& options) {
  proto::open_request request{};
  request.name = checked_name(name, "allocation name");
  request.access = options.access == Access::read_only ? proto::access_mode::read_only
                                                       : proto::access_mode::read_write;
  return connection_->adopt(connection_->call<proto::allocation_reply>(message_type::open, request),
                            options.stream);
}

void Client::ping() {
  connection_->call<proto::empty_payload>(message_type::ping, proto::empty_payload{});
}

Stats Client::stats() {
  const auto reply =
      connection_->call<proto::stats_reply>(message_type::stats, proto::empty_payload{});
  Stats stats;
  stats.clients = reply.head.client_count;
  stats.allocations = reply.head.allocation_count;
  stats.uptime_ms = reply.head.uptime_ms;
  stats.daemon_pid = reply.head.daemon_pid;
  stats.cuda = (reply.head.features & proto::kFeatureCuda) != 0;
  stats.mps = (reply.head.features & proto::kFeatureMps) != 0;
  stats.ipc_events_live = reply.head.ipc_events_live;
  for (const auto& record : reply.records) {
    stats.pools.push_back({std::string(record.name.view()), record.pool_id, record.device,
                           record.size_limit, record.bytes_in_use, record.bytes_reserved,
                           record.bytes_in_use_high, record.allocations,
                           record.driver_reserved_current, record.driver_reserved_high,
                           record.driver_used_current, record.driver_used_high});
  }
  return stats;
}

std::vector<ClientInfo> Client::clients() {
  return list_all<proto::client_record, ClientInfo>(
      *connection_, message_type::list_clients, [](const proto::client_record& r) {
        return ClientInfo{r.client_id,
                          r.pid,
                          r.uid,
                          r.gid,
                          r.allocations_owned,
                          r.allocations_opened,
                          r.bytes_owned,
                          r.connected_ms,
                          std::string(r.label.view())};
      });
}

std::vector<AllocationInfo> Client::allocations() {
  return list_all<proto::allocation_record, AllocationInfo>(
      *connection_, message_type::list_allocations, [](const proto::allocation_record& r) {
        return AllocationInfo{r.alloc_id, r.size,    r.owner_client_id,
                              r.pool_id,  r.holders, std::string(r.name.view())};
      });
}

std::vector<ReservationInfo> Client::reservations() {
  return list_all<proto::reservation_record, ReservationInfo>(
      *connection_, message_type::list_reservations, [](const proto::reservation_record& r) {
        return ReservationInfo{r.reservation_id,          r.max_size, r.committed,
                               r.owner_client_id,         r.holders,  r.device,
                               std::string(r.name.view())};
      });
}

namespace {

std::string domain_text(std::uint32_t word) {
  const auto device = std::to_string(sync::device_of(word));
  switch (sync::domain_of(word)) {
    case sync::domain::host:
      return "host";
    case sync::domain::stream:
      return "stream:" + device;
    case sync::domain::device:
      return "device:" + device;
    case sync::domain::unset:
      break;
  }
  return "unused";
}

SyncInfo to_info(const proto::sync_record& r) {
  SyncInfo info;
  info.id = r.sync_id;
  info.kind = r.kind == proto::sync_kind::lock      ? SyncKind::lock
              : r.kind == proto::sync_kind::barrier ? SyncKind::barrier
                                                    : SyncKind::channel;
  info.name = std::string(r.name.view());
  info.domain = domain_text(r.domain);
  info.parties = r.parties;
  info.attached = r.attached;
  info.owner_pid = r.owner_pid;
  info.queued = r.queued;
  info.owner_deaths = r.owner_deaths;
  info.epoch = r.epoch;
  if (info.kind == SyncKind::lock) {
    info.owner_died = (r.flags & sync::lock_word::kOwnerDied) != 0;
    info.not_recoverable = (r.flags & sync::lock_word::kNotRecoverable) != 0;
  } else {
    info.broken = (r.flags & sync::counter_cell::kBroken) != 0;
  }
  return info;
}

}  // namespace

std::vector<SyncInfo> Client::sync_objects() {
  return list_all<proto::sync_record, SyncInfo>(*connection_, message_type::list_sync, to_info);
}

void Client::reset(std::string_view name, std::uint32_t parties) {
  connection_->call<proto::empty_payload>(
      message_type::reset_sync,
      proto::sync_reset_request{checked_name(name, "object"), parties, 0});
}

std::uint64_t Client::id() const noexcept {
  return connection_->client_id;
}

const std::string& Client::socket_path() const noexcept {
  return connection_->path();
}

}  // namespace gpumem
