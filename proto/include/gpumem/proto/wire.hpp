#pragma once
/// @file
/// @brief Framing of the gpumemd protocol: the fixed header every message starts with, limits,
/// handle types and bounded names.
///
/// A frame is a 24-byte header followed by `payload_size` bytes. All integers are little-endian;
/// layouts are pinned below with static_assert. File descriptors travel beside the bytes with
/// SCM_RIGHTS; the header says how many and of which kind, so a receiver never guesses.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <system_error>

namespace gpumem::proto {

static_assert(std::endian::native == std::endian::little,
              "the wire layouts are memcpy'd: port the codec before building on a big-endian host");

inline constexpr std::uint32_t kMagic = 0x444d5047;  // "GPMD" in memory order
/// 5: a lock word may be held alone (an owner and no ticket; shared/sync/layout.hpp), which a
/// version-4 client would take for free.
inline constexpr std::uint16_t kProtocolVersion = 5;
inline constexpr std::uint32_t kMaxPayloadSize = 64 * 1024;
/// The kernel refuses more than SCM_MAX_FD (253) descriptors in one message.
inline constexpr std::uint16_t kMaxFdsPerMessage = 253;
inline constexpr std::size_t kNameCapacity = 64;  ///< bytes including the terminating NUL
inline constexpr std::size_t kMaxNameLength = kNameCapacity - 1;

/// What a message's file descriptors are. Fixed numbers: part of the protocol.
enum class handle_type : std::uint16_t {
  none = 0,
  host_memfd = 1,     ///< memfd of a host pool, to be mmap'd MAP_SHARED
  cuda_posix_fd = 2,  ///< CUDA shareable handle of type POSIX file descriptor
  cuda_fabric = 3,    ///< reserved for CU_MEM_HANDLE_TYPE_FABRIC (sent as bytes, not fds)
  mailbox = 4,        ///< a request mailbox's memfd, then its doorbell eventfd (proto/mailbox.hpp)
};

bool is_known_handle_type(std::uint16_t raw) noexcept;

struct header {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t type;  ///< a message_type
  std::uint32_t request_id;
  std::uint32_t payload_size;
  std::uint16_t fd_count;
  std::uint16_t handle;    ///< a handle_type; none exactly when fd_count is 0
  std::uint32_t reserved;  ///< zero
};
static_assert(sizeof(header) == 24);
static_assert(offsetof(header, type) == 6);
static_assert(offsetof(header, request_id) == 8);
static_assert(offsetof(header, payload_size) == 12);
static_assert(offsetof(header, fd_count) == 16);
static_assert(offsetof(header, handle) == 18);

/// The largest frame either side sends: a header and the largest payload.
inline constexpr std::size_t kMaxFrameSize = sizeof(header) + kMaxPayloadSize;

/// A name on the wire: at most 63 characters from [A-Za-z0-9._:/@+-], NUL-terminated, the rest
/// of the field zero. Empty means "no name" where a field allows it.
struct wire_name {
  char bytes[kNameCapacity];

  std::string_view view() const noexcept;
};
static_assert(sizeof(wire_name) == kNameCapacity);

/// @brief Checks a name a user typed before anything is sent.
/// @return invalid_name (with nothing written) when it is too long or has a forbidden character.
std::error_code make_wire_name(std::string_view text, wire_name& out) noexcept;

/// @brief Checks a name that arrived from the wire: terminated, allowed characters, zero tail.
std::error_code check_wire_name(const wire_name& name, bool allow_empty) noexcept;

}  // namespace gpumem::proto
