#pragma once
// The wire protocol spoken by hand, for tests of what the client library never sends.

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "gpumem/proto/codec.hpp"
#include "gpumem/shared/fd_passing.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::testing {

template <class Reply>
struct raw_answer {
  proto::errc code = proto::errc::ok;
  std::string text;  ///< the daemon's words when it refused
  Reply reply{};
  std::vector<unique_fd> fds;
};

/// One connection speaking the protocol by hand, for what the client library never asks: pools
/// of other tenants, a hello the daemon refuses, words written into a shared page. Failures of
/// the connection itself throw; the daemon's refusals come back in raw_answer::code.
class raw_client {
 public:
  explicit raw_client(const std::string& path)
      : socket_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.c_str(), path.size());
    if (::connect(socket_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      throw std::system_error(errno, std::generic_category(), "connect " + path);
    }
  }

  raw_answer<proto::hello_reply> hello() {
    return call<proto::hello_reply>(proto::message_type::hello,
                                    proto::hello_request{proto::kProtocolVersion, 0, {}, 0, {}});
  }

  /// @brief A hello that resumes the session @p session named.
  raw_answer<proto::hello_reply> resume(const proto::hello_reply& session) {
    return call<proto::hello_reply>(
        proto::message_type::hello,
        proto::hello_request{proto::kProtocolVersion, 0, {}, session.client_id, session.token});
  }

  /// @brief @p bytes as they are: what no client library sends (a broken frame header, say).
  void send_bytes(std::span<const std::byte> bytes) {
    std::error_code error;
    send_with_fds(socket_.get(), bytes, {}, error);
    if (error) throw std::system_error(error, "sending bytes");
  }

  /// The id the last request went with.
  std::uint32_t last_request_id() const noexcept { return next_id_ - 1; }
  /// @brief The next request goes with @p id, those after it with the ids that follow.
  void number_next_request(std::uint32_t id) noexcept { next_id_ = id; }

  template <class Reply, class Request>
  raw_answer<Reply> call(proto::message_type type, const Request& request) {
    std::vector<std::byte> frame;
    proto::append_frame(frame, static_cast<std::uint16_t>(type), next_id_++, request);
    std::error_code error;
    send_with_fds(socket_.get(), frame, {}, error);
    if (error) throw std::system_error(error, "sending a request");
    raw_answer<Reply> answer;
    const proto::frame_view got = receive(answer.fds);
    const auto drop_frame = [&] {
      in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(got.frame_size()));
    };
    if (got.head.type == static_cast<std::uint16_t>(proto::message_type::error)) {
      proto::error_reply refusal{};
      if (proto::decode_payload(got.payload, refusal)) throw std::runtime_error("bad error reply");
      answer.code = static_cast<proto::errc>(refusal.code);
      answer.text = refusal.text;
    } else if (got.head.type != proto::reply_type(type) ||
               proto::decode_payload(got.payload, answer.reply)) {
      throw std::runtime_error("an unexpected reply");
    }
    drop_frame();
    return answer;
  }

  /// @brief Sends @p count copies of a request in one write and reads none of the replies.
  template <class Request>
  void send_unanswered(proto::message_type type, const Request& request, int count) {
    std::vector<std::byte> frames;
    for (int i = 0; i < count; ++i) {
      proto::append_frame(frames, static_cast<std::uint16_t>(type), next_id_++, request);
    }
    std::error_code error;
    send_with_fds(socket_.get(), frames, {}, error);
    if (error) throw std::system_error(error, "sending requests");
  }

  /// @brief Whether the daemon closes the connection within @p within.
  bool closed_by_daemon(std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd ready{socket_.get(), POLLIN, 0};
      if (::poll(&ready, 1, 10) <= 0) continue;
      char chunk[256];
      const ssize_t got = ::recv(socket_.get(), chunk, sizeof chunk, 0);
      if (got <= 0) return true;
    }
    return false;
  }

 private:
  proto::frame_view receive(std::vector<unique_fd>& fds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      proto::frame_view frame;
      std::error_code error;
      const auto status = proto::parse_frame(in_, frame, error);
      if (status == proto::parse_status::complete) return frame;
      if (status == proto::parse_status::invalid) throw std::runtime_error("an invalid frame");
      pollfd ready{socket_.get(), POLLIN, 0};
      if (std::chrono::steady_clock::now() > deadline || ::poll(&ready, 1, 100) < 0) {
        throw std::runtime_error("no reply in time");
      }
      if ((ready.revents & (POLLIN | POLLHUP)) == 0) continue;
      std::byte chunk[4096];
      const std::size_t got = recv_with_fds(socket_.get(), chunk, fds, error);
      if (error || got == 0) throw std::runtime_error("the daemon closed the connection");
      in_.insert(in_.end(), chunk, chunk + got);
    }
  }

  unique_fd socket_;
  std::uint32_t next_id_ = 1;
  std::vector<std::byte> in_;
};

}  // namespace gpumem::testing
