#include "gpumem/reservation.hpp"

#include <vector>

#include "connection.hpp"

#ifdef GPUMEM_WITH_CUDA
#include "cuda_context.hpp"
#endif

namespace gpumem {

using proto::message_type;

#ifdef GPUMEM_WITH_CUDA

struct Reservation::state {
  /// The handle before the mapping: the chunk is unmapped before its handle is released.
  struct mapped_chunk {
    std::uint64_t id;
    cuda::allocation_handle handle;
    cuda::mapped_range mapping;
  };

  std::shared_ptr<detail::connection> connection;
  const cuda::driver_api& cu = detail::cuda_driver();
  proto::reservation_reply granted{};
  // In the order they are made, so that they go in reverse: chunks, range, context.
  cuda::primary_context context;
  cuda::address_range range;
  std::vector<mapped_chunk> chunks;

  explicit state(std::shared_ptr<detail::connection> session) : connection(std::move(session)) {}

  // Reserves this process's range; a failure here gives the grant back.
  void map_range(const proto::reservation_reply& grant) {
    granted = grant;
    CUdevice device = 0;
    detail::check_cuda(cu.cuDeviceGet(&device, grant.device), "cuDeviceGet");
    detail::check_cuda(cuda::primary_context::retain(cu, device, context),
                       "retaining the primary context");
    detail::context_scope scope(cu, context.get());
    detail::check_cuda(cuda::address_range::reserve(cu, grant.max_size, grant.chunk_size, range),
                       "cuMemAddressReserve");
    refresh();
  }

  std::size_t refresh() {
    std::vector<proto::chunk_record> wanted;
    std::vector<unique_fd> fds;
    for (bool more = true; more;) {
      std::vector<unique_fd> page_fds;
      const auto page = connection->call<proto::chunks_reply>(
          message_type::get_chunks,
          proto::chunks_request{granted.reservation_id, static_cast<std::uint32_t>(wanted.size()),
                                0},
          &page_fds);
      if (page_fds.size() != page.records.size()) {
        throw Error(errc::unexpected_handle, "gpumemd sent a chunk without its descriptor");
      }
      wanted.insert(wanted.end(), page.records.begin(), page.records.end());
      for (auto& fd : page_fds) fds.push_back(std::move(fd));
      more = page.head.more != 0 && !page.records.empty();
    }
    detail::context_scope scope(cu, context.get());
    // Chunks keep their ids: the first index whose id differs is where the mappings change.
    std::size_t same = 0;
    while (same < chunks.size() && same < wanted.size() &&
           chunks[same].id == wanted[same].chunk_id) {
      ++same;
    }
    chunks.erase(chunks.begin() + static_cast<std::ptrdiff_t>(same), chunks.end());
    for (std::size_t index = same; index < wanted.size(); ++index) {
      mapped_chunk chunk{wanted[index].chunk_id, {}, {}};
      detail::check_cuda(cuda::allocation_handle::import_fd(cu, fds[index].get(), chunk.handle),
                         "cuMemImportFromShareableHandle");
      const CUdeviceptr at = range.get() + index * granted.chunk_size;
      detail::check_cuda(
          cuda::mapped_range::map(cu, at, granted.chunk_size, chunk.handle.get(), chunk.mapping),
          "cuMemMap");
      chunks.push_back(std::move(chunk));
      CUmemAccessDesc access{};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = context.device();
      access.flags = granted.access == proto::access_mode::read_only
                         ? CU_MEM_ACCESS_FLAGS_PROT_READ
                         : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      detail::check_cuda(cu.cuMemSetAccess(at, granted.chunk_size, &access, 1), "cuMemSetAccess");
    }
    return chunks.size() * granted.chunk_size;
  }

  /// Maps a grant the daemon just made; a failure gives it back.
  static std::unique_ptr<state> adopt(const std::shared_ptr<detail::connection>& session,
                                      const proto::reservation_reply& grant) {
    auto self = std::make_unique<state>(session);
    try {
      self->map_range(grant);
    } catch (...) {
      self.reset();
      session->call<proto::empty_payload>(message_type::release_reservation,
                                          proto::reservation_release_request{grant.reservation_id});
      throw;
    }
    return self;
  }
};

Reservation Reservation::create(Client& client, std::size_t max_bytes,
                                const ReserveOptions& options) {
  if (max_bytes == 0 || options.initial > max_bytes) {
    throw Error(errc::invalid_argument, "a reservation needs 0 < initial <= max_bytes");
  }
  detail::cuda_driver();  // fail before asking the daemon when this process has no CUDA
  proto::reserve_request request{
      max_bytes, options.initial, options.device, detail::creation_flags(options.mode), {}};
  if (proto::make_wire_name(options.name, request.name)) {
    throw Error(errc::invalid_name, "reservation name '" + std::string(options.name) +
                                        "' is not 0-63 characters of [A-Za-z0-9._:/@+-]");
  }
  auto session = client.connection_;
  return Reservation(state::adopt(
      session, session->call<proto::reservation_reply>(message_type::reserve, request)));
}

Reservation Reservation::open(Client& client, std::string_view name,
                              const OpenReservationOptions& options) {
  detail::cuda_driver();
  proto::open_request request{};
  if (name.empty() || proto::make_wire_name(name, request.name)) {
    throw Error(errc::invalid_name, "reservation name '" + std::string(name) +
                                        "' is not 1-63 characters of [A-Za-z0-9._:/@+-]");
  }
  request.access = options.access == Access::read_only ? proto::access_mode::read_only
                                                       : proto::access_mode::read_write;
  auto session = client.connection_;
  return Reservation(state::adopt(
      session, session->call<proto::reservation_reply>(message_type::open_reservation, request)));
}

void* Reservation::data() const noexcept {
  return reinterpret_cast<void*>(self_->range.get());
}
std::size_t Reservation::size() const noexcept {
  return self_->chunks.size() * self_->granted.chunk_size;
}
std::size_t Reservation::max_size() const noexcept {
  return self_->granted.max_size;
}
std::size_t Reservation::chunk_size() const noexcept {
  return self_->granted.chunk_size;
}
std::uint64_t Reservation::id() const noexcept {
  return self_->granted.reservation_id;
}
int Reservation::device() const noexcept {
  return self_->granted.device;
}
Access Reservation::access() const noexcept {
  return self_->granted.access == proto::access_mode::read_only ? Access::read_only
                                                                : Access::read_write;
}

void Reservation::resize(std::size_t bytes) {
  self_->granted = self_->connection->call<proto::reservation_reply>(
      message_type::resize_reservation, proto::resize_request{id(), bytes});
  self_->refresh();
}

std::size_t Reservation::refresh() {
  return self_->refresh();
}

void Reservation::release() {
  if (!self_) return;
  const std::uint64_t reservation_id = id();
  auto session = self_->connection;
  self_.reset();  // unmaps first: the chunks must not be used after the daemon lets go
  session->call<proto::empty_payload>(message_type::release_reservation,
                                      proto::reservation_release_request{reservation_id});
}

#else

struct Reservation::state {};

Reservation Reservation::create(Client&, std::size_t, const ReserveOptions&) {
  throw Error(errc::not_supported, "this libgpumem was built without CUDA support");
}
Reservation Reservation::open(Client&, std::string_view, const OpenReservationOptions&) {
  throw Error(errc::not_supported, "this libgpumem was built without CUDA support");
}
void* Reservation::data() const noexcept {
  return nullptr;
}
std::size_t Reservation::size() const noexcept {
  return 0;
}
std::size_t Reservation::max_size() const noexcept {
  return 0;
}
std::size_t Reservation::chunk_size() const noexcept {
  return 0;
}
std::uint64_t Reservation::id() const noexcept {
  return 0;
}
int Reservation::device() const noexcept {
  return 0;
}
Access Reservation::access() const noexcept {
  return Access::read_write;
}
void Reservation::resize(std::size_t) {}
std::size_t Reservation::refresh() {
  return 0;
}
void Reservation::release() {}

#endif

Reservation::Reservation(std::unique_ptr<state> self) : self_(std::move(self)) {}
Reservation::Reservation(Reservation&&) noexcept = default;
Reservation& Reservation::operator=(Reservation&& other) noexcept {
  Reservation taken(std::move(other));
  std::swap(self_, taken.self_);  // what *this held is released when `taken` goes
  return *this;
}
Reservation::~Reservation() {
  try {
    release();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report; release() can
  }
}

}  // namespace gpumem
