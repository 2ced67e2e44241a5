#include "memory/host_reservation.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "gpumem/proto/messages.hpp"
#include "gpumem/shared/os/memfd.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

namespace {
// pread and pwrite move at most 2 GiB less a page per call; a chunk is far below that, but a
// short count (a signal) is retried all the same.
template <class Transfer>
void whole_transfer(Transfer&& transfer, std::size_t bytes, const char* what) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t moved = transfer(done, bytes - done);
    if (moved < 0 && errno == EINTR) continue;
    if (moved <= 0) throw std::system_error(moved < 0 ? errno : EIO, std::system_category(), what);
    done += static_cast<std::size_t>(moved);
  }
}
}  // namespace

host_reservation::host_reservation(std::uint64_t max_size)
    : max_size_(whole_chunk_bytes(max_size, kChunkSize)) {}

host_reservation::host_reservation(std::uint64_t max_size, std::vector<adopted_chunk> chunks)
    : max_size_(max_size) {
  for (adopted_chunk& each : chunks) {
    chunk_ids_from(each.id + 1);
    chunks_.push_back(make_chunk(each.id, std::move(each.fd)));
  }
}

host_reservation::memfd_chunk host_reservation::make_chunk(std::uint64_t id, unique_fd memory) {
  memfd_chunk made;
  made.id = id;
  made.read_only = os::reopen_read_only(memory.get());
  made.memory = std::move(memory);
  return made;
}

std::int32_t host_reservation::device() const noexcept {
  return proto::kHostDevice;
}

reservation::chunk host_reservation::chunk_at(std::size_t index) const {
  const memfd_chunk& each = chunks_.at(index);
  return {each.id, each.memory.get(), each.read_only.get()};
}

void host_reservation::resize(std::size_t chunks) {
  if (chunks * kChunkSize > max_size_) {
    throw request_error(
        proto::errc::invalid_argument,
        fmt::format("{} bytes exceed the reservation's {}", chunks * kChunkSize, max_size_));
  }
  std::vector<memfd_chunk> made;
  for (std::size_t index = chunks_.size(); index < chunks; ++index) {
    try {
      const std::uint64_t id = new_chunk_id();
      made.push_back(make_chunk(id, os::make_memfd("gpumemd:reservation", kChunkSize)));
    } catch (const std::system_error& failure) {
      // All or nothing: what this call made goes with `made`.
      throw request_error(proto::errc::out_of_memory,
                          fmt::format("no host memory for {} more bytes: {}",
                                      (chunks - chunks_.size()) * kChunkSize, failure.what()));
    }
  }
  for (memfd_chunk& each : made) chunks_.push_back(std::move(each));
  chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(std::min(chunks, chunks_.size())),
                chunks_.end());
}

void host_reservation::copy_out(sleep_copy& host) const {
  for (std::size_t index = 0; index < chunks_.size(); ++index) {
    std::byte* into = host.data() + index * kChunkSize;
    whole_transfer(
        [&](std::size_t done, std::size_t left) {
          return ::pread(chunks_[index].memory.get(), into + done, left, static_cast<off_t>(done));
        },
        kChunkSize, "reading a reservation chunk");
  }
}

void host_reservation::copy_in(sleep_copy& host) {
  for (std::size_t index = 0; index < chunks_.size(); ++index) {
    const std::byte* from = host.data() + index * kChunkSize;
    whole_transfer(
        [&](std::size_t done, std::size_t left) {
          return ::pwrite(chunks_[index].memory.get(), from + done, left, static_cast<off_t>(done));
        },
        kChunkSize, "writing a reservation chunk");
  }
}

void host_reservation::clear() {
  for (const memfd_chunk& each : chunks_) {
    if (const int error = os::punch_hole(each.memory.get(), 0, kChunkSize); error != 0) {
      throw std::system_error(error, std::system_category(), "clearing a reservation chunk");
    }
  }
}

void host_reservation::seal() {
  for (const memfd_chunk& each : chunks_) {
    if (::fcntl(each.memory.get(), F_ADD_SEALS, F_SEAL_WRITE) == 0) continue;
    if (errno == EBUSY) {
      throw request_error(proto::errc::busy,
                          fmt::format("chunk {} is still mapped writable: unmap the draft before "
                                      "committing it",
                                      each.id));
    }
    throw std::system_error(errno, std::system_category(), "sealing a reservation chunk");
  }
}

std::unique_ptr<reservation> make_host_reservation(std::uint64_t max_size) {
  return std::make_unique<host_reservation>(max_size);
}

}  // namespace gpumem::daemon
