#include "connection.hpp"

#include <utility>

#include "gpumem/shared/os/mapping.hpp"
#include "host_mapping.hpp"
#include "sync_pages.hpp"

namespace gpumem::detail {

using proto::message_type;

std::shared_ptr<connection> connection::open(const ConnectOptions& options) {
  return std::make_shared<connection>(options);
}

connection::connection(const ConnectOptions& options) : link_(options), imports_(link_) {}

connection::~connection() = default;

namespace {
void check_own_only_honoured(std::uint32_t features) {
  if ((features & proto::kFeatureOwnOnly) != 0) return;
  throw Error(errc::not_supported,
              "this gpumemd cannot open only objects of the caller's own uid "
              "(open_own_objects_only): it would join another user's object of the name; "
              "upgrade gpumemd");
}
}  // namespace

void connection::set_own_objects_only(bool only) {
  if (only) check_own_only_honoured(daemon_features());
  own_objects_only_.store(only);
}

std::uint32_t connection::open_flags() const {
  if (!own_objects_only()) return 0;
  check_own_only_honoured(daemon_features());
  return proto::kFlagOwnOnly;
}

Buffer connection::adopt(const proto::allocation_reply& grant, Stream stream) {
  Buffer buffer;
  buffer.connection_ = shared_from_this();
  buffer.id_ = grant.alloc_id;
  buffer.size_ = grant.size;
  buffer.stream_ = stream;
  buffer.access_ =
      grant.access == proto::access_mode::read_only ? Access::read_only : Access::read_write;
  // From here on a throw runs ~Buffer, which gives the grant back: nothing leaks in the daemon.
  imported_pool& home = imports_.pool(grant.pool_id);
  buffer.device_ = home.device;
  if (home.device != kHost) {
    buffer.data_ = imports_.import_device(home, grant, stream);
    return buffer;
  }
  os::mapping mapped = map_host_allocation(home.memfd.get(), grant, buffer.access_);
  buffer.mapping_size_ = mapped.size();
  buffer.mapping_ = buffer.data_ = mapped.release();  // the Buffer's until release() below
  return buffer;
}

void connection::release(Buffer& buffer, Stream last_use) {
  os::mapping(buffer.mapping_, buffer.mapping_size_).reset();  // host buffers: unmapped here
  const bool on_device = buffer.device_ != kHost && buffer.data_ != nullptr;
  const std::uint64_t id = std::exchange(buffer.id_, 0);
  buffer.mapping_ = buffer.data_ = nullptr;
  buffer.size_ = buffer.mapping_size_ = 0;
  auto self = std::move(buffer.connection_);
  // A forked child's copy of a buffer is only dropped: the parent still holds it.
  if (id == 0 || !link_.in_owner_process()) return;
  proto::release_request request{id, 0, 0, {}};
  std::lock_guard lock(release_mutex_);
  if (on_device) imports_.release_device(id, last_use, request);
  link_.call<proto::empty_payload>(message_type::release, request);
}

sync_pages& connection::sync() {
  std::lock_guard lock(sync_mutex_);
  if (!sync_) sync_ = std::make_unique<sync_pages>(link_);
  return *sync_;
}

}  // namespace gpumem::detail
