#include "connection.hpp"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "gpumem/shared/fd_passing.hpp"
#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/socket_path.hpp"
#include "sync_pages.hpp"
#ifdef GPUMEM_WITH_CUDA
#include "cuda_context.hpp"
#include "cuda_imports.hpp"
#else
namespace gpumem::detail {
class cuda_imports {};  // built without CUDA: there is never anything to import
}  // namespace gpumem::detail
#endif

extern char* program_invocation_short_name;

namespace gpumem::detail {

using proto::message_type;

namespace {
// Bumped in every child at fork(): lets a connection notice it crossed a fork without a
// getpid() system call on every request.
std::atomic<std::uint64_t> fork_generation{0};
const bool fork_watch_installed = [] {
  ::pthread_atfork(nullptr, nullptr, [] { ++fork_generation; });
  return true;
}();

std::size_t page_rounded(std::size_t size) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (size + page - 1) & ~(page - 1);
}

[[noreturn]] void throw_io(const std::string& what, const std::error_code& error) {
  throw Error(errc::io_error, what + ": " + error.message());
}

// Keeps the label within the wire alphabet so a program name never fails the handshake.
proto::wire_name label_for(const std::string& wanted) {
  std::string text = wanted.empty() ? program_invocation_short_name : wanted;
  text.resize(std::min(text.size(), proto::kMaxNameLength));
  for (char& c : text) {
    proto::wire_name probe{};
    if (proto::make_wire_name(std::string_view(&c, 1), probe)) c = '_';
  }
  proto::wire_name label{};
  (void)proto::make_wire_name(text, label);
  return label;
}
}  // namespace

std::shared_ptr<connection> connection::open(const ConnectOptions& options) {
  const std::string path =
      options.socket_path.empty() ? default_client_socket_path() : options.socket_path;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    throw Error(errc::invalid_argument, "socket path too long: " + path);
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  unique_fd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!socket) throw_io("socket", {errno, std::system_category()});
  int result;
  do {
    result = ::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  } while (result != 0 && errno == EINTR);
  if (result != 0) {
    throw_io(
        "cannot reach gpumemd at " + path + " (is it running? set GPUMEM_SOCKET to its socket)",
        {errno, std::system_category()});
  }
  auto session = std::make_shared<connection>(std::move(socket), path);
  const auto hello = session->call<proto::hello_reply>(
      message_type::hello,
      proto::hello_request{proto::kProtocolVersion, 0, label_for(options.label)});
  session->client_id = hello.client_id;
  return session;
}

connection::connection(unique_fd socket, std::string path)
    : socket_(std::move(socket)),
      path_(std::move(path)),
      owner_pid_(::getpid()),
      fork_generation_(fork_generation.load()) {
  (void)fork_watch_installed;
  in_.resize(sizeof(proto::header) + proto::kMaxPayloadSize);
}

bool connection::in_owner_process() const noexcept {
  return fork_generation.load(std::memory_order_relaxed) == fork_generation_;
}

connection::~connection() = default;

void connection::check_owner_process() const {
  if (!in_owner_process()) {
    throw Error(errc::invalid_argument, "this gpumem client was connected by process " +
                                            std::to_string(owner_pid_) +
                                            "; a forked child must connect its own");
  }
}

proto::frame_view connection::exchange(message_type type, std::vector<unique_fd>& fds) {
  check_owner_process();
  std::size_t sent = 0;
  while (sent < out_.size()) {
    std::error_code error;
    sent += send_with_fds(socket_.get(), std::span(out_).subspan(sent), {}, error);
    if (error) throw_io("sending to gpumemd", error);
  }
  std::size_t filled = 0;
  proto::frame_view frame;
  for (;;) {
    std::error_code error;
    const std::size_t received =
        recv_with_fds(socket_.get(), std::span(in_).subspan(filled), fds, error);
    if (error) {
      throw Error(error == std::errc::protocol_error ? errc::unexpected_handle : errc::io_error,
                  "receiving from gpumemd: " + error.message());
    }
    if (received == 0) throw Error(errc::connection_closed, "gpumemd closed the connection");
    filled += received;
    const auto status = proto::parse_frame(std::span(in_).first(filled), frame, error);
    if (status == proto::parse_status::invalid) {
      throw Error(errc::bad_message, "gpumemd sent a bad frame: " + error.message());
    }
    if (status == proto::parse_status::complete) break;
  }
  // Only one request is ever outstanding, so anything beyond the frame is a broken peer.
  if (frame.frame_size() != filled || frame.head.request_id != last_request_id_) {
    throw Error(errc::bad_message, "gpumemd's reply does not match the request");
  }
  if (fds.size() != frame.head.fd_count) {
    throw Error(errc::unexpected_handle,
                "gpumemd's reply announced " + std::to_string(frame.head.fd_count) +
                    " descriptor(s) and carried " + std::to_string(fds.size()));
  }
  if (frame.head.type == static_cast<std::uint16_t>(message_type::error)) {
    proto::error_reply refusal{};
    if (proto::decode_payload(frame.payload, refusal)) {
      throw Error(errc::bad_message, "gpumemd sent a malformed error reply");
    }
    throw Error(static_cast<errc>(refusal.code), refusal.text);
  }
  if (frame.head.type != proto::reply_type(type)) {
    throw Error(errc::bad_message, "gpumemd answered with the wrong message type");
  }
  const std::uint16_t expected_fds =
      proto::find_request(static_cast<std::uint16_t>(type))->reply_fds;
  if (expected_fds != proto::kFdPerRecord && frame.head.fd_count != expected_fds) {
    throw Error(errc::unexpected_handle, "gpumemd's reply carries an unexpected descriptor count");
  }
  return frame;
}

const connection::imported_pool& connection::pool(std::uint32_t pool_id) {
  std::lock_guard lock(pools_mutex_);
  if (const auto found = pools_.find(pool_id); found != pools_.end()) return found->second;
  std::vector<unique_fd> fds;
  const auto reply =
      call<proto::pool_reply>(message_type::get_pool, proto::get_pool_request{pool_id, 0}, &fds);
  if (fds.size() != 1 || reply.pool_id != pool_id) {
    throw Error(errc::unexpected_handle,
                "gpumemd sent no handle for pool " + std::to_string(pool_id));
  }
  imported_pool entry{std::move(fds[0]), reply.device, reply.device != proto::kHostDevice};
#ifdef GPUMEM_WITH_CUDA
  if (entry.cuda) cuda().add_pool(reply, std::move(entry.handle));
#else
  if (entry.cuda) cuda();
#endif
  return pools_.emplace(pool_id, std::move(entry)).first->second;
}

#ifdef GPUMEM_WITH_CUDA
cuda_imports& connection::cuda() {
  std::lock_guard lock(cuda_mutex_);
  if (!cuda_) cuda_ = std::make_unique<cuda_imports>(cuda_driver());
  return *cuda_;
}

void* connection::import_device(const proto::allocation_reply& grant, Stream stream) {
  return reinterpret_cast<void*>(cuda().import(grant, stream));
}

void connection::release_device(std::uint64_t id, Stream last_use,
                                proto::release_request& request) {
  cuda().release(id, last_use, request);
}
#else
cuda_imports& connection::cuda() {
  throw Error(errc::not_supported, "this libgpumem was built without CUDA support");
}

void* connection::import_device(const proto::allocation_reply&, Stream) {
  cuda();  // throws
  return nullptr;
}

void connection::release_device(std::uint64_t, Stream, proto::release_request&) {
  cuda();
}
#endif

Buffer connection::adopt(const proto::allocation_reply& grant, Stream stream) {
  Buffer buffer;
  buffer.connection_ = shared_from_this();
  buffer.id_ = grant.alloc_id;
  buffer.size_ = grant.size;
  buffer.stream_ = stream;
  buffer.access_ =
      grant.access == proto::access_mode::read_only ? Access::read_only : Access::read_write;
  // From here on a throw runs ~Buffer, which gives the grant back: nothing leaks in the daemon.
  const imported_pool& home = pool(grant.pool_id);
  buffer.device_ = home.device;
  if (home.cuda) {
    buffer.data_ = import_device(grant, stream);
    return buffer;
  }
  std::error_code error;
  os::mapping mapped = os::mapping::share(
      home.handle.get(), page_rounded(grant.size),
      buffer.access_ == Access::read_write ? os::access::read_write : os::access::read_only,
      grant.offset, error);
  if (error) throw Error(errc::io_error, "mapping allocation: " + error.message());
  buffer.mapping_size_ = mapped.size();
  buffer.mapping_ = buffer.data_ = mapped.release();  // the Buffer's until release() below
  return buffer;
}

void connection::release(Buffer& buffer, Stream last_use) {
  os::mapping(buffer.mapping_, buffer.mapping_size_).reset();
  const bool on_device = buffer.device_ != kHost && buffer.data_ != nullptr;
  const std::uint64_t id = std::exchange(buffer.id_, 0);
  buffer.mapping_ = buffer.data_ = nullptr;
  buffer.size_ = buffer.mapping_size_ = 0;
  auto self = std::move(buffer.connection_);
  // A forked child's copy of a buffer is only dropped: the parent still holds it.
  if (id == 0 || !in_owner_process()) return;
  proto::release_request request{id, 0, 0, {}};
  std::lock_guard lock(release_mutex_);
  if (on_device) release_device(id, last_use, request);
  call<proto::empty_payload>(message_type::release, request);
}

sync_pages& connection::sync() {
  std::lock_guard lock(sync_mutex_);
  if (!sync_) sync_ = std::make_unique<sync_pages>(*this);
  return *sync_;
}

}  // namespace gpumem::detail
