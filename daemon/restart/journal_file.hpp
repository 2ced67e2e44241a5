#pragma once
/// @file
/// @brief The journal memfd the daemon appends its batches to (daemon/restart/journal.hpp for
/// their layout), through a mapping rather than a pwrite per batch: every request that changes
/// the state appends one before its reply goes out, and the system call was half of what
/// keeping the state cost a request. The file is made as large as its room at once, so the bytes
/// after the last batch read as zeroes, which a replay takes for the journal's clean end; its
/// memory is taken as it fills, 256 KiB at a time (fallocate), so that a batch the system has no
/// memory for is refused with an error rather than faulting in the middle of its copy.

#include <cstdint>
#include <span>

#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::daemon::restart {

class journal_file {
 public:
  journal_file() = default;

  /// @brief A new journal of @p generation: its header, and room for @p room bytes in all.
  /// Sealed against shrinking: a journal never loses a batch it had.
  /// @throws std::system_error naming the call that failed (no memory for its first pages among
  /// them).
  static journal_file create(std::uint64_t generation, std::uint64_t room);
  /// @brief A journal another daemon wrote, whose whole batches end at @p end: appends go on
  /// from there. Grown to @p room bytes where it is smaller.
  /// @throws std::system_error naming the call that failed.
  static journal_file adopt(unique_fd fd, std::uint64_t end, std::uint64_t room);

  /// @brief Copies @p batch after the last one. @return false, writing nothing, where there is
  /// no room for it or no memory.
  bool append(std::span<const std::byte> batch) noexcept;

  int fd() const noexcept { return fd_.get(); }
  /// Bytes in use: the header and the batches.
  std::uint64_t size() const noexcept { return size_; }
  /// Bytes the file has room for.
  std::uint64_t room() const noexcept { return mapped_.size(); }
  /// @brief The header and the batches, as a replay reads them.
  std::span<const std::byte> written() const noexcept {
    return {static_cast<const std::byte*>(mapped_.get()), static_cast<std::size_t>(size_)};
  }
  explicit operator bool() const noexcept { return static_cast<bool>(fd_); }

 private:
  static constexpr std::uint64_t kPagesTakenAtOnce = 256 << 10;

  journal_file(unique_fd fd, std::uint64_t end, std::uint64_t room);
  /// Takes the memory of the file up to @p end where it is not taken yet; false (errno set) where
  /// the system has none.
  bool take_pages_for(std::uint64_t end) noexcept;

  unique_fd fd_;
  os::mapping mapped_;
  std::uint64_t size_ = 0;
  std::uint64_t pages_taken_ = 0;  ///< fallocated from the start of the file
};

}  // namespace gpumem::daemon::restart
