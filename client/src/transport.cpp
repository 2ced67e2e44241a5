#include "transport.hpp"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "gpumem/shared/fd_passing.hpp"
#include "gpumem/shared/socket_path.hpp"

extern char* program_invocation_short_name;

namespace gpumem::detail {

using proto::message_type;

namespace {
// Bumped in every child at fork(): lets a transport notice it crossed a fork without a
// getpid() system call on every request.
std::atomic<std::uint64_t> fork_generation{0};
const bool fork_watch_installed = [] {
  ::pthread_atfork(nullptr, nullptr, [] { ++fork_generation; });
  return true;
}();

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

unique_fd connect_to(const std::string& path) {
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
  return socket;
}
}  // namespace

transport::transport(const ConnectOptions& options)
    : path_(options.socket_path.empty() ? default_client_socket_path() : options.socket_path),
      owner_pid_(::getpid()),
      fork_generation_(fork_generation.load()) {
  (void)fork_watch_installed;
  socket_ = connect_to(path_);
  in_.resize(sizeof(proto::header) + proto::kMaxPayloadSize);
  client_id_ = call<proto::hello_reply>(
                   message_type::hello,
                   proto::hello_request{proto::kProtocolVersion, 0, label_for(options.label)})
                   .client_id;
}

bool transport::in_owner_process() const noexcept {
  return fork_generation.load(std::memory_order_relaxed) == fork_generation_;
}

void transport::check_owner_process() const {
  if (!in_owner_process()) {
    throw Error(errc::invalid_argument, "this gpumem client was connected by process " +
                                            std::to_string(owner_pid_) +
                                            "; a forked child must connect its own");
  }
}

proto::frame_view transport::exchange(message_type type, std::vector<unique_fd>& fds) {
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

}  // namespace gpumem::detail
