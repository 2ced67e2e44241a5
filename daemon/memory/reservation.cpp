#include "memory/reservation.hpp"

#include <fmt/format.h>

#include <atomic>
#include <limits>

#include "request_error.hpp"

namespace gpumem::daemon {

std::uint64_t whole_chunk_bytes(std::uint64_t max_size, std::uint64_t chunk) {
  if (whole_chunks(max_size, chunk) > std::numeric_limits<std::uint64_t>::max() / chunk) {
    throw request_error(proto::errc::invalid_argument,
                        fmt::format("a reservation of {} bytes cannot be rounded up to whole "
                                    "{}-byte chunks in 64 bits",
                                    max_size, chunk));
  }
  return whole_chunks(max_size, chunk) * chunk;
}

namespace {
std::atomic<std::uint64_t> next_id{1};
}

std::uint64_t new_chunk_id() noexcept {
  return next_id++;
}

std::uint64_t next_chunk_id() noexcept {
  return next_id.load();
}

void chunk_ids_from(std::uint64_t next) noexcept {
  std::uint64_t current = next_id.load();
  while (current < next && !next_id.compare_exchange_weak(current, next)) {
  }
}

}  // namespace gpumem::daemon
