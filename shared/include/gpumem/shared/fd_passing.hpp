#pragma once
/// @file
/// @brief The one pair of functions through which bytes and file descriptors cross a Unix
/// stream socket (SCM_RIGHTS). Both work on blocking and non-blocking sockets.

#include <sys/types.h>

#include <cstddef>
#include <span>
#include <system_error>
#include <vector>

#include "gpumem/shared/unique_fd.hpp"

namespace gpumem {

/// @brief sendmsg of @p bytes with @p fds attached to the first byte sent.
/// @return bytes sent (possibly fewer than asked; the fds went with them all the same), or an
///         error: EAGAIN from a full non-blocking socket, EINVAL for more than 253 fds. EINTR is
///         retried. Never raises SIGPIPE.
std::size_t send_with_fds(int socket, std::span<const std::byte> bytes, std::span<const int> fds,
                          std::error_code& error) noexcept;

/// @brief recvmsg into @p buffer; received descriptors (close-on-exec) are appended to @p fds.
/// @return bytes received, 0 at end of stream. A truncated control message (MSG_CTRUNC) is an
///         error (EPROTO) and the descriptors that did arrive are closed, not returned.
std::size_t recv_with_fds(int socket, std::span<std::byte> buffer, std::vector<unique_fd>& fds,
                          std::error_code& error) noexcept;

}  // namespace gpumem
