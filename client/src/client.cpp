#include <utility>

#include "connection.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "gpumem/slab.hpp"
#include "reservation_state.hpp"
#include "wire_names.hpp"

namespace gpumem {

using proto::message_type;

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

// One conversion per wire record: every public Info struct is filled here and nowhere else.

PoolStats to_info(const proto::pool_stats& r) {
  return {.name = std::string(r.name.view()),
          .id = r.pool_id,
          .device = r.device,
          .size_limit = r.size_limit,
          .bytes_in_use = r.bytes_in_use,
          .bytes_reserved = r.bytes_reserved,
          .bytes_in_use_high = r.bytes_in_use_high,
          .allocations = r.allocations,
          .driver_reserved_current = r.driver_reserved_current,
          .driver_reserved_high = r.driver_reserved_high,
          .driver_used_current = r.driver_used_current,
          .driver_used_high = r.driver_used_high};
}

Stats to_info(const proto::stats_reply& reply) {
  Stats stats{.pools = {},
              .clients = reply.head.client_count,
              .allocations = reply.head.allocation_count,
              .uptime_ms = reply.head.uptime_ms,
              .daemon_pid = reply.head.daemon_pid,
              .cuda = (reply.head.features & proto::kFeatureCuda) != 0,
              .mps = (reply.head.features & proto::kFeatureMps) != 0,
              .ipc_events_live = reply.head.ipc_events_live,
              .state_kept = (reply.head.features & proto::kFeatureStateKept) != 0};
  for (const auto& record : reply.records) stats.pools.push_back(to_info(record));
  return stats;
}

ClientInfo to_info(const proto::client_record& r) {
  return {.id = r.client_id,
          .pid = r.pid,
          .reported_pid = r.client_pid,
          .uid = r.uid,
          .gid = r.gid,
          .allocations_owned = r.allocations_owned,
          .allocations_opened = r.allocations_opened,
          .bytes_owned = r.bytes_owned,
          .connected_ms = r.connected_ms,
          .label = std::string(r.label.view())};
}

AllocationInfo to_info(const proto::allocation_record& r) {
  return {.id = r.alloc_id,
          .size = r.size,
          .owner_client = r.owner_client_id,
          .pool = r.pool_id,
          .holders = r.holders,
          .name = std::string(r.name.view())};
}

ReservationInfo to_info(const proto::reservation_record& r) {
  return {.id = r.reservation_id,
          .max_size = r.max_size,
          .committed = r.committed,
          .owner_client = r.owner_client_id,
          .holders = r.holders,
          .device = r.device,
          .name = std::string(r.name.view()),
          .version = r.version,
          .draft_version = r.draft_version,
          .oldest_mapped = r.oldest_mapped,
          .retained_bytes = r.retained_bytes,
          .host_bytes = r.host_bytes,
          .state = detail::to_state(r.state),
          .holders_current = r.holders_current,
          .holders_behind = r.holders_behind};
}

SyncInfo to_info(const proto::sync_record& r) {
  const SyncKind kind = r.kind == proto::sync_kind::lock      ? SyncKind::lock
                        : r.kind == proto::sync_kind::barrier ? SyncKind::barrier
                                                              : SyncKind::channel;
  // The flags are a lock word's for locks and a counter cell's for barriers and channels.
  const bool lock = kind == SyncKind::lock;
  return {.id = r.sync_id,
          .kind = kind,
          .name = std::string(r.name.view()),
          .domain = domain_text(r.domain),
          .parties = r.parties,
          .attached = r.attached,
          .owner_pid = r.owner_pid,
          .held = lock && (r.flags & proto::sync_record::kHeld) != 0,
          .owner_client = r.owner_client_id,
          .queued = r.queued,
          .owner_deaths = r.owner_deaths,
          .epoch = r.epoch,
          .owner_died = lock && (r.flags & sync::lock_word::kOwnerDied) != 0,
          .not_recoverable = lock && (r.flags & sync::lock_word::kNotRecoverable) != 0,
          .broken = !lock && (r.flags & sync::counter_cell::kBroken) != 0,
          .corrupt = (r.flags & proto::sync_record::kCorrupt) != 0};
}

UsageInfo to_info(const proto::usage_record& r) {
  const auto limit = [](std::uint64_t value) {
    return value == proto::kNoLimit ? std::nullopt : std::optional<std::uint64_t>(value);
  };
  return {.uid = r.uid,
          .connections = r.connections,
          .host_bytes = r.host_bytes,
          .device_bytes = r.device_bytes,
          .allocations = r.memory_objects,
          .sync_objects = r.sync_objects,
          .connections_limit = limit(r.connections_limit),
          .bytes_limit = limit(r.bytes_limit),
          .allocations_limit = limit(r.memory_objects_limit),
          .sync_objects_limit = limit(r.sync_objects_limit)};
}

/// Where the next page starts: records are listed by id, usage by uid + 1 (uid 0 exists).
template <class Info>
std::uint64_t page_key(const Info& info) {
  return info.id;
}
std::uint64_t page_key(const UsageInfo& info) {
  return std::uint64_t{info.uid} + 1;
}

/// Every record of a list request, page by page, as public Info structs.
template <class Record>
auto list_all(detail::connection& connection, message_type type) {
  std::vector<decltype(to_info(std::declval<const Record&>()))> all;
  std::uint64_t after = 0;
  for (;;) {
    const auto page = connection.call<proto::list_payload<proto::list_head, Record>>(
        type, proto::list_request{after});
    for (const auto& record : page.records) all.push_back(to_info(record));
    if (!page.head.more || page.records.empty()) return all;
    after = page_key(all.back());
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
  if (bytes == 0) {
    throw Error(errc::invalid_argument,
                options.name.empty()
                    ? std::string("cannot allocate 0 bytes")
                    : "cannot allocate 0 bytes for '" + std::string(options.name) + "'");
  }
  if (options.device < kHost) {
    throw Error(errc::no_such_device,
                "device " + std::to_string(options.device) + " does not exist");
  }
  proto::allocate_request request{};
  request.size = bytes;
  request.device = options.device;
  request.flags = detail::creation_flags(options.mode);
  request.name = detail::checked_name_or_none(options.name, "allocation name");
  request.pool = detail::checked_name_or_none(options.pool, "pool name");
  return connection_->adopt(
      connection_->call<proto::allocation_reply>(message_type::allocate, request), options.stream);
}

Buffer Client::open(std::string_view name, const OpenOptions& options) {
  proto::open_request request{};
  request.name = detail::checked_name(name, "allocation name");
  request.access = options.access == Access::read_only ? proto::access_mode::read_only
                                                       : proto::access_mode::read_write;
  request.flags = connection_->open_flags();
  return connection_->adopt(connection_->call<proto::allocation_reply>(message_type::open, request),
                            options.stream);
}

void Client::open_own_objects_only(bool only) {
  connection_->set_own_objects_only(only);
}

bool Client::opens_own_objects_only() const noexcept {
  return connection_->own_objects_only();
}

void Client::ping() {
  connection_->call<proto::empty_payload>(message_type::ping, proto::empty_payload{});
}

Stats Client::stats() {
  return to_info(
      connection_->call<proto::stats_reply>(message_type::stats, proto::empty_payload{}));
}

std::string Client::metrics() {
  // The text is rendered once and read in pages; a page of another rendering (the session was
  // resumed on a new connection meanwhile) starts the reading over.
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    std::string text;
    proto::metrics_request next{};
    try {
      for (;;) {
        const auto page = connection_->call<proto::metrics_reply>(message_type::get_metrics, next);
        if (page.head.offset != text.size()) {
          throw Error(errc::bad_message, "gpumemd sent a metrics page out of order");
        }
        text.append(page.records.begin(), page.records.end());
        if (!page.head.more) return text;
        next = {page.head.snapshot, static_cast<std::uint32_t>(text.size()), 0};
      }
    } catch (const Error& error) {
      if (error.status() != errc::wrong_state || attempt == kAttempts) throw;
    }
  }
}

std::vector<ClientInfo> Client::clients() {
  return list_all<proto::client_record>(*connection_, message_type::list_clients);
}

std::vector<AllocationInfo> Client::allocations() {
  return list_all<proto::allocation_record>(*connection_, message_type::list_allocations);
}

std::vector<ReservationInfo> Client::reservations() {
  return list_all<proto::reservation_record>(*connection_, message_type::list_reservations);
}

std::vector<UsageInfo> Client::usage() {
  return list_all<proto::usage_record>(*connection_, message_type::list_usage);
}

std::vector<SyncInfo> Client::sync_objects() {
  return list_all<proto::sync_record>(*connection_, message_type::list_sync);
}

void Client::reset(std::string_view name, std::uint32_t parties) {
  connection_->call<proto::empty_payload>(
      message_type::reset_sync,
      proto::sync_reset_request{detail::checked_name(name, "object name"), parties, 0});
}

std::uint64_t Client::id() const noexcept {
  return connection_->client_id();
}

const std::string& Client::socket_path() const noexcept {
  return connection_->path();
}

}  // namespace gpumem
