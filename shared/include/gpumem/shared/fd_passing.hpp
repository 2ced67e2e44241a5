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

struct msghdr;

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

// The same, one message at a time, for callers that make the system call themselves (the
// daemon batches its sends and receives on an io_uring: daemon/net/io_batch.hpp).

/// Bytes of control space attach_fds needs for @p count descriptors.
std::size_t fd_control_size(std::size_t count) noexcept;
/// Bytes of control space a receive needs to tell "too many descriptors" from a truncation.
std::size_t fd_receive_control_size() noexcept;
/// @brief Attaches @p fds (at most 253) to @p message in @p control, of fd_control_size bytes.
void attach_fds(msghdr& message, std::span<std::byte> control, std::span<const int> fds) noexcept;
/// @brief After a recvmsg into @p message (with MSG_CMSG_CLOEXEC): appends what arrived to
/// @p fds, or, when the control message was truncated, closes them and sets EPROTO.
void take_fds(msghdr& message, std::vector<unique_fd>& fds, std::error_code& error) noexcept;

}  // namespace gpumem
