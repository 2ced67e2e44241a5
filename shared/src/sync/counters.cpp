#include "gpumem/shared/sync/counters.hpp"

#include <atomic>
#include <cstddef>

namespace gpumem::sync {

void break_party(counter_cell& cell, signal_words* page, std::uint32_t index, std::uint32_t party) {
  break_counters(cell);
  if (page == nullptr) return;
  const std::size_t count_at = offsetof(signal_cell, counts) + party * sizeof(std::uint32_t);
  const std::uint32_t count = page->read(index, count_at);
  page->write(index, offsetof(signal_cell, broken), 1);
  page->write(index, count_at, count + kBrokenLead);
}

void reset(counter_cell& cell, signal_words* page, std::uint32_t index, std::uint32_t parties,
           std::uint32_t epoch) {
  if (page != nullptr) page->clear(index);
  reset_counters(cell, parties, epoch);
}

void rewrite(counter_cell& cell, signal_words* page, std::uint32_t index, std::uint32_t parties,
             std::uint32_t epoch) {
  reset(cell, page, index, parties, epoch);
  std::atomic_ref<std::uint32_t>(cell.domain).store(0, std::memory_order_relaxed);
}

}  // namespace gpumem::sync
