#include "memory/reservation.hpp"

#include <atomic>

namespace gpumem::daemon {

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
