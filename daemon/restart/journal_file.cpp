#include "restart/journal_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>
#include <vector>

#include "gpumem/shared/os/memfd.hpp"
#include "restart/journal.hpp"

namespace gpumem::daemon::restart {

namespace {
std::uint64_t page_rounded(std::uint64_t bytes) {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}
}  // namespace

journal_file::journal_file(unique_fd fd, std::uint64_t end, std::uint64_t room)
    : fd_(std::move(fd)), size_(end) {
  const std::uint64_t had = os::file_size(fd_.get());
  const std::uint64_t length = page_rounded(std::max({room, had, end}));
  if (had < length && ::ftruncate(fd_.get(), static_cast<off_t>(length)) != 0) {
    throw std::system_error(errno, std::system_category(), "ftruncate (growing the state journal)");
  }
  mapped_ = os::mapping::share(fd_.get(), length, os::access::read_write);
  if (!take_pages_for(size_)) {
    throw std::system_error(errno, std::system_category(), "fallocate (the state journal)");
  }
}

bool journal_file::take_pages_for(std::uint64_t end) noexcept {
  // Pages are taken ahead of the writes, a stretch at a time: a write through the mapping that
  // needed a page the system could not give would fault (the OOM killer, or SIGBUS), where a
  // failed pwrite returned an error. fallocate returns it, and the caller writes a snapshot.
  if (end <= pages_taken_) return true;
  const std::uint64_t upto = std::min<std::uint64_t>(
      mapped_.size(), page_rounded(std::max(end, pages_taken_ + kPagesTakenAtOnce)));
  if (::fallocate(fd_.get(), 0, static_cast<off_t>(pages_taken_),
                  static_cast<off_t>(upto - pages_taken_)) != 0) {
    return false;
  }
  pages_taken_ = upto;
  return true;
}

journal_file journal_file::create(std::uint64_t generation, std::uint64_t room) {
  const std::vector<std::byte> header = file_header(file_kind::journal, generation);
  const std::uint64_t length = page_rounded(std::max<std::uint64_t>(room, header.size()));
  // Empty, not os::make_memfd's sized one sealed against growing: a later daemon adopting this
  // journal grows it where it wants more room than this one made.
  journal_file made(os::make_empty_memfd("gpumemd-journal"), 0, length);
  if (!made.append(header)) {
    throw std::system_error(errno, std::system_category(), "fallocate (the state journal)");
  }
  if (::fcntl(made.fd(), F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
    throw std::system_error(errno, std::system_category(), "sealing the state journal");
  }
  return made;
}

journal_file journal_file::adopt(unique_fd fd, std::uint64_t end, std::uint64_t room) {
  return journal_file(std::move(fd), end, room);
}

bool journal_file::append(std::span<const std::byte> batch) noexcept {
  if (size_ > mapped_.size() || batch.size() > mapped_.size() - size_) return false;
  if (!take_pages_for(size_ + batch.size())) return false;
  std::memcpy(static_cast<std::byte*>(mapped_.get()) + size_, batch.data(), batch.size());
  size_ += batch.size();
  return true;
}

}  // namespace gpumem::daemon::restart
