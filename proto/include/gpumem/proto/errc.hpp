#pragma once
/// @file
/// @brief The closed set of status codes that cross the wire, as a std::error_code category.
///
/// The numeric values are part of the protocol and of the C API (`gpumem.h`): never renumber,
/// only append.

#include <cstdint>
#include <string_view>
#include <system_error>

#include "gpumem/export.h"

namespace gpumem::proto {

// X(name, value, description)
#define GPUMEM_ERRC_TABLE(X)                                        \
  X(ok, 0, "success")                                               \
  X(bad_message, 1, "malformed message")                            \
  X(unsupported_version, 2, "unsupported protocol version")         \
  X(unknown_message_type, 3, "unknown message type")                \
  X(invalid_name, 4, "invalid name")                                \
  X(invalid_argument, 5, "invalid argument")                        \
  X(not_found, 6, "no such object")                                 \
  X(already_exists, 7, "name already in use")                       \
  X(out_of_memory, 8, "pool exhausted")                             \
  X(no_such_device, 9, "no such device")                            \
  X(permission_denied, 10, "permission denied")                     \
  X(unexpected_handle, 11, "unexpected or missing file descriptor") \
  X(connection_closed, 12, "connection closed")                     \
  X(io_error, 13, "socket error")                                   \
  X(internal, 14, "internal error")                                 \
  X(cuda_error, 15, "CUDA error")                                   \
  X(not_supported, 16, "not supported by this daemon")              \
  X(not_lock_owner, 17, "not the holder of the lock")               \
  X(not_recoverable, 18, "lock not recoverable")                    \
  X(wrong_domain, 19, "used in another domain")                     \
  X(no_party_left, 20, "every party is taken")                      \
  X(quota_exceeded, 21, "quota exceeded")                           \
  X(timed_out, 22, "timed out")                                     \
  X(session_lost, 23, "session lost")                               \
  X(busy, 24, "in use")                                             \
  X(wrong_state, 25, "not in a state that allows it")

enum class errc : std::uint32_t {
#define GPUMEM_X(name, value, text) name = value,
  GPUMEM_ERRC_TABLE(GPUMEM_X)
#undef GPUMEM_X
};

/// @brief True when @p raw is one of the codes above (decoders use it to refuse unknown codes).
GPUMEM_API bool is_known_errc(std::uint32_t raw) noexcept;

/// @brief Short fixed description of a code, e.g. "no such object".
GPUMEM_API std::string_view describe(errc code) noexcept;

/// @brief The category all gpumem status codes belong to; its name is "gpumem".
GPUMEM_API const std::error_category& gpumem_category() noexcept;

inline std::error_code make_error_code(errc code) noexcept {
  return {static_cast<int>(code), gpumem_category()};
}

}  // namespace gpumem::proto

template <>
struct std::is_error_code_enum<gpumem::proto::errc> : std::true_type {};
