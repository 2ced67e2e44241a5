#pragma once
/// @file
/// @brief Anonymous shared memory that the daemon hands to clients: a memfd of a fixed size.

#include <cstddef>
#include <cstdint>
#include <string>

#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::os {

/// @brief A memfd of @p size zeroed bytes (close-on-exec, mode 0600), sealed against resizing: a
/// client that shrank it would make every other mapping of it fault (SIGBUS).
/// @param name shown in /proc/PID/maps and fd listings, e.g. "gpumemd:frames".
/// @throws std::system_error naming the step that failed.
unique_fd make_sealed_memfd(const std::string& name, std::size_t size);
/// @brief As make_sealed_memfd, but its owner may add seals later (F_SEAL_WRITE, to freeze
/// what it holds); a reader's read-only descriptor cannot add any.
unique_fd make_memfd(const std::string& name, std::size_t size);

/// @brief An empty memfd (close-on-exec, mode 0600, seals allowed), its size and seals left to
/// its owner: the daemon's state files, a snapshot sealed whole once written and a journal sealed
/// against shrinking only, which a later daemon may grow. @throws std::system_error
unique_fd make_empty_memfd(const std::string& name);

/// @brief The same memfd opened again read-only: mmap refuses to map it writable, and a process
/// of another uid cannot reopen it writable (the memfd's mode is 0600), so a client given it can
/// read and never write. @throws std::system_error
unique_fd reopen_read_only(int memfd);

/// @brief The size of the file behind @p fd. @throws std::system_error
std::uint64_t file_size(int fd);

/// @brief Takes the pages of [@p offset, @p offset + @p length) out of the memfd @p fd: the range
/// then reads zeroes and its memory goes back to the system.
/// @return 0, or the errno of the failure (a memfd sealed against writes refuses, EPERM).
int punch_hole(int fd, std::uint64_t offset, std::uint64_t length) noexcept;

}  // namespace gpumem::os
