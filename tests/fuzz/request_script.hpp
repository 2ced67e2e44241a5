#pragma once
// The input format of the request-path fuzz target: a script of steps, each a byte that names
// the step and the client, then the step's operands. The reader never fails: a script that ends
// early is padded with zeroes, so every byte string is a script. The writer builds seeds.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "gpumem/proto/codec.hpp"

namespace gpumem::fuzz {

inline constexpr std::size_t kClients = 4;

enum class step : std::uint8_t {
  connect = 0,       ///< a new connection for the client (no-op when it has one)
  frame = 1,         ///< u16 type, u16 payload size, u8 fds, payload: a well-formed header
  raw = 2,           ///< u16 size, u8 fds, bytes: sent as they are
  disconnect = 3,    ///< the client closes its socket
  process_exit = 4,  ///< the client's process ends: the daemon sees it as the pidfd would say
  read = 5,          ///< the client reads (and checks) every reply waiting for it
  hello = 6,         ///< a valid hello
  settle = 7,        ///< the server's periodic retry of pending lock clean-ups
};
inline constexpr std::uint8_t kStepCount = 8;

/// Which of the harness's own descriptors a step attaches: bit i set attaches descriptor i.
inline constexpr std::size_t kAttachableFds = 3;  // a memfd, a pipe's read end, its write end
/// Set in a frame or raw step's descriptor byte: the bytes go through the client's request
/// mailbox (proto/mailbox.hpp) instead of its socket, once a read took open_mailbox's answer;
/// descriptors cannot go that way. With it, in a raw step: kOversized makes the slot's size word
/// say more than the slot holds, kNoNewRequest rings without putting a request in.
inline constexpr std::uint8_t kThroughMailbox = 0x80;
inline constexpr std::uint8_t kOversized = 0x40;
inline constexpr std::uint8_t kNoNewRequest = 0x20;

class script_reader {
 public:
  explicit script_reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  bool done() const noexcept { return at_ >= bytes_.size(); }
  std::uint8_t u8() noexcept { return done() ? 0 : bytes_[at_++]; }
  std::uint16_t u16() noexcept {
    const std::uint16_t low = u8();
    return static_cast<std::uint16_t>(low | (u8() << 8));
  }
  std::span<const std::byte> take(std::size_t size) noexcept {
    size = std::min(size, bytes_.size() - std::min(at_, bytes_.size()));
    const auto taken = std::as_bytes(bytes_.subspan(at_, size));
    at_ += size;
    return taken;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

class script_writer {
 public:
  void add(step kind, std::size_t client) {
    bytes_.push_back(static_cast<std::uint8_t>(static_cast<std::uint8_t>(kind) +
                                               kStepCount * static_cast<std::uint8_t>(client)));
  }
  template <class Payload>
  void frame(std::size_t client, proto::message_type type, const Payload& payload,
             std::uint8_t fds = 0) {
    std::vector<std::byte> encoded;
    proto::append_frame(encoded, static_cast<std::uint16_t>(type), 0, payload);
    const auto body = std::span(encoded).subspan(sizeof(proto::header));
    add(step::frame, client);
    u16(static_cast<std::uint16_t>(type));
    u16(static_cast<std::uint16_t>(body.size()));
    bytes_.push_back(fds);
    for (const std::byte b : body) bytes_.push_back(static_cast<std::uint8_t>(b));
  }
  void raw(std::size_t client, std::span<const std::byte> data, std::uint8_t fds = 0) {
    add(step::raw, client);
    u16(static_cast<std::uint16_t>(data.size()));
    bytes_.push_back(fds);
    for (const std::byte b : data) bytes_.push_back(static_cast<std::uint8_t>(b));
  }
  const std::vector<std::uint8_t>& bytes() const noexcept { return bytes_; }

 private:
  void u16(std::uint16_t value) {
    bytes_.push_back(static_cast<std::uint8_t>(value & 0xff));
    bytes_.push_back(static_cast<std::uint8_t>(value >> 8));
  }
  std::vector<std::uint8_t> bytes_;
};

}  // namespace gpumem::fuzz
