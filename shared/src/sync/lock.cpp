#include "gpumem/shared/sync/lock.hpp"

#include <algorithm>
#include <atomic>
#include <vector>

namespace gpumem::sync {

namespace {

// Cells are shared with clients that change them at any time: every read is atomic.
std::uint32_t load(std::uint32_t& word) noexcept {
  return std::atomic_ref<std::uint32_t>(word).load(std::memory_order_acquire);
}

void count_death(lock_cell& cell) noexcept {
  std::atomic_ref<std::uint32_t>(cell.owner_deaths).fetch_add(1, std::memory_order_relaxed);
}

/// Gives @p tickets of the cell's lock, which no live process will take, to the page, the
/// oldest first (a later turn of the lock comes only once the earlier is passed), calling
/// @p given(ticket) after each.
template <class Given>
void pass_turns(const lock_cell& cell, std::vector<std::uint16_t>& tickets, signal_words& page,
                std::uint32_t index, Given given) {
  const std::uint16_t next = load_lock_word(cell).next;
  std::sort(tickets.begin(), tickets.end(), [&](std::uint16_t a, std::uint16_t b) {
    return static_cast<std::uint16_t>(next - a) > static_cast<std::uint16_t>(next - b);
  });
  for (const std::uint16_t ticket : tickets) {
    page.pass_turn(index, ticket, static_cast<std::uint16_t>(ticket + 1));
    given(ticket);
  }
}

/// Moves the entry of @p ticket, which the dead @p slot queued, from waiting to @p left.
void leave_entry(lock_cell& cell, std::uint16_t ticket, std::uint16_t slot,
                 std::uint32_t left) noexcept {
  std::uint32_t waiting = queue_entry{ticket, slot, true, queue_entry::waiting}.encode();
  std::atomic_ref<std::uint32_t>(cell.queue[ticket % kLockQueueLength])
      .compare_exchange_strong(waiting, left, std::memory_order_acq_rel);
}

std::uint32_t reclaim_stream_turns(lock_cell& cell, signal_words* page, std::uint32_t index,
                                   std::uint16_t dead_slot) {
  const std::uint16_t next = load_lock_word(cell).next;
  std::vector<std::uint16_t> tickets;
  for (auto& raw : cell.queue) {
    const auto entry = queue_entry::decode(load(raw));
    // An abandoned entry is a turn given to the page at an earlier death of this slot.
    if (entry.state != queue_entry::waiting || !entry.stream || entry.slot != dead_slot) continue;
    if (entry.ticket != next && page != nullptr) {
      tickets.push_back(entry.ticket);
    } else {  // never taken (it died between claim and word), or no page to pass it on
      leave_entry(cell, entry.ticket, dead_slot, 0);
    }
  }
  if (tickets.empty()) return 0;
  // The page tells whether each turn has come, or was served already (the dead client's stream
  // wrote the next turn and died before it cleared the entry). Such a turn counts as a death
  // too, a race of one batch of two stream writes.
  std::uint32_t given = 0;
  try {
    pass_turns(cell, tickets, *page, index, [&](std::uint16_t ticket) {
      // Once the page has the turn, its entry stays taken, abandoned, until the page has seen
      // the turn passed (free_passed_turn()): no ticket is taken a queue's length past it.
      leave_entry(cell, ticket, dead_slot,
                  queue_entry{ticket, dead_slot, true, queue_entry::abandoned}.encode());
      count_death(cell);
      ++given;
    });
  } catch (...) {
    // The turns the page did not take are lost, as with no page: their entries go.
    for (const std::uint16_t ticket : tickets) leave_entry(cell, ticket, dead_slot, 0);
    throw;
  }
  return given;
}

bool release_device_lock(lock_cell& cell, signal_words* page, std::uint32_t index,
                         std::uint16_t dead_slot) {
  if (page == nullptr) return false;
  if (page->read(index, offsetof(signal_cell, device_lock)) != dead_slot) return false;
  page->write(index, offsetof(signal_cell, owner_died), 1);
  page->write(index, offsetof(signal_cell, device_lock), 0);
  count_death(cell);
  return true;
}

}  // namespace

reclaim_result reclaim(lock_cell& cell, signal_words* page, std::uint32_t index,
                       std::uint16_t dead_slot, const lock_facts& facts) {
  reclaim_result result;
  const domain where = domain_of(load(cell.domain));
  if (where != domain::stream && where != domain::device) {
    result.repair = reclaim_lock(cell, dead_slot, facts);
  } else if (const char* rule = check_lock_cell(cell, facts)) {
    result.repair = {repair_status::corrupt, rule};
  } else if (where == domain::stream) {
    result.turns_passed = reclaim_stream_turns(cell, page, index, dead_slot);
  } else {
    result.device_lock_released = release_device_lock(cell, page, index, dead_slot);
  }
  return result;
}

reset_result reset(lock_cell& cell, signal_words* page, std::uint32_t index,
                   const lock_facts& facts) {
  if (const char* rule = check_lock_cell(cell, facts)) {
    rewrite(cell, page, index, static_cast<std::uint16_t>(facts.epoch + 1));
    return {true, rule};
  }
  const domain where = domain_of(load(cell.domain));
  if (where == domain::stream) return {false, nullptr};
  if (where == domain::device && page != nullptr) {
    page->write(index, offsetof(signal_cell, owner_died), 0);
    page->write(index, offsetof(signal_cell, device_lock), 0);
  }
  return {true, reset_lock(cell, facts)};
}

reclaim_result resume_stream_turns(lock_cell& cell, signal_words& page, std::uint32_t index,
                                   const lock_facts& facts) {
  reclaim_result result;
  if (domain_of(load(cell.domain)) != domain::stream) return result;
  if (const char* rule = check_lock_cell(cell, facts)) {
    result.repair = {repair_status::corrupt, rule};
    return result;
  }
  std::vector<std::uint16_t> tickets;
  for (auto& raw : cell.queue) {
    const auto entry = queue_entry::decode(load(raw));
    if (entry.state == queue_entry::abandoned && entry.stream) tickets.push_back(entry.ticket);
  }
  pass_turns(cell, tickets, page, index, [](std::uint16_t) {});
  result.turns_passed = static_cast<std::uint32_t>(tickets.size());
  return result;
}

void free_passed_turn(lock_cell& cell, std::uint16_t ticket) noexcept {
  auto entry = std::atomic_ref<std::uint32_t>(cell.queue[ticket % kLockQueueLength]);
  std::uint32_t seen = entry.load(std::memory_order_acquire);
  const auto found = queue_entry::decode(seen);
  // Anything else there is a later ticket's, or the cell was rewritten since.
  if (found.state != queue_entry::abandoned || !found.stream || found.ticket != ticket) return;
  entry.compare_exchange_strong(seen, 0, std::memory_order_acq_rel);
}

void rewrite(lock_cell& cell, signal_words* page, std::uint32_t index, std::uint16_t epoch) {
  if (page != nullptr) page->clear(index);
  rewrite_lock(cell, epoch);
}

}  // namespace gpumem::sync
