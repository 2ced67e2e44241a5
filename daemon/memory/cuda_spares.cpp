#include "memory/cuda_spares.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <new>
#include <utility>

namespace gpumem::daemon {

cuda_spares::cuda_spares(maker make, discarder discard, family_room& room)
    : make_(std::move(make)),
      discard_(std::move(discard)),
      room_(room),
      worker_([this] { work(); }) {}

void cuda_spares::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (worker_.joinable()) worker_.join();
}

bool cuda_spares::ready(std::uint64_t size) const {
  std::lock_guard lock(mutex_);
  return ready_.contains(size);
}

std::optional<exported_block> cuda_spares::take(std::uint64_t size) {
  std::lock_guard lock(mutex_);
  const auto found = ready_.find(size);
  if (found == ready_.end()) return std::nullopt;
  const exported_block block = found->second.back();
  found->second.pop_back();
  if (found->second.empty()) ready_.erase(found);
  uncount(size);
  return block;
}

void cuda_spares::uncount(std::uint64_t size) noexcept {
  bytes_ -= size;
  room_.release_spare(size);
}

std::size_t cuda_spares::sizes_kept() const noexcept {
  // Counted in place: want() runs on the loop after each reply, and wanted_ holds at most
  // kMaxSizes * kBlocksPerSize sizes.
  std::size_t sizes = ready_.size();
  for (auto each = wanted_.begin(); each != wanted_.end(); ++each) {
    if (!ready_.contains(*each) && std::find(wanted_.begin(), each, *each) == each) ++sizes;
  }
  return sizes;
}

bool cuda_spares::count_one_more(std::uint64_t size, std::size_t kept) noexcept {
  if (size > kMaxBlockSize || kept >= kBlocksPerSize || bytes_ + size > kMaxBytes) return false;
  if (kept == 0 && sizes_kept() >= kMaxSizes) return false;
  if (!room_.hold_spare(size)) return false;
  bytes_ += size;
  return true;
}

std::size_t cuda_spares::kept_of(std::uint64_t size) const noexcept {
  const auto ready = ready_.find(size);
  return (ready == ready_.end() ? 0 : ready->second.size()) +
         static_cast<std::size_t>(std::count(wanted_.begin(), wanted_.end(), size));
}

void cuda_spares::want(std::uint64_t size) noexcept {
  std::lock_guard lock(mutex_);
  for (std::size_t kept = kept_of(size); count_one_more(size, kept); ++kept) {
    wanted_.push_back(size);  // room for every wish made in the constructor
    unstarted_ = true;
  }
}

bool cuda_spares::offer(std::uint64_t size, const exported_block& block) noexcept {
  std::lock_guard lock(mutex_);
  if (stopping_) return false;
  const auto wanted = std::find(wanted_.begin(), wanted_.end(), size);
  // Counted already, as wanted; otherwise counted now, if there is room.
  if (wanted == wanted_.end() && !count_one_more(size, kept_of(size))) return false;
  if (!store_ready(size, block)) {  // freed by the caller as if not offered
    if (wanted == wanted_.end()) uncount(size);
    return false;
  }
  if (wanted != wanted_.end()) wanted_.erase(wanted);
  ++counted_.reused;
  return true;
}

bool cuda_spares::store_ready(std::uint64_t size, const exported_block& block) noexcept {
  try {
    // A new size's list goes in whole, so that no list of ready blocks is ever empty, also when
    // there is no memory for it: take() relies on that. Both inserts change nothing if they throw.
    if (const auto found = ready_.find(size); found != ready_.end()) {
      found->second.push_back(block);
    } else {
      ready_.emplace(size, std::vector<exported_block>{block});
    }
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}

std::optional<exported_block> cuda_spares::make(std::uint64_t size) noexcept {
  try {
    return make_(size);
  } catch (const std::exception& error) {
    try {
      spdlog::error("spare block of {} bytes not made: {}", size, error.what());
    } catch (...) {
      // A log line that cannot be made (its text is allocated) must not end the daemon.
    }
    return std::nullopt;
  } catch (...) {
    return std::nullopt;  // nothing to name it by; the worker goes on all the same
  }
}

void cuda_spares::start_wanted() noexcept {
  {
    std::lock_guard lock(mutex_);
    if (!std::exchange(unstarted_, false)) return;
    asked_at_ = std::chrono::steady_clock::now();
  }
  wake_.notify_one();
}

cuda_spares::blocks_by_size cuda_spares::drain() noexcept {
  std::lock_guard lock(mutex_);
  blocks_by_size blocks;
  blocks.swap(ready_);
  wanted_.clear();
  uncount(bytes_);
  ++generation_;
  return blocks;
}

cuda_spares::origins cuda_spares::counted() const {
  std::lock_guard lock(mutex_);
  return counted_;
}

std::uint64_t cuda_spares::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

std::uint64_t cuda_spares::ready_bytes() const {
  std::lock_guard lock(mutex_);
  std::uint64_t total = 0;
  for (const auto& [size, blocks] : ready_) total += size * blocks.size();
  return total;
}

void cuda_spares::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || (!wanted_.empty() && !unstarted_); });
    if (stopping_) return;
    const std::uint64_t size = wanted_.back();
    const std::uint64_t generation = generation_;
    const auto asked_at = asked_at_;
    lock.unlock();
    const auto woken = std::chrono::steady_clock::now();
    const std::optional<exported_block> block = make(size);
    const auto made = std::chrono::steady_clock::now();
    try {
      spdlog::debug(
          "spare block of {} bytes: made in {} us, started {} us after the worker was "
          "last asked",
          size, std::chrono::duration_cast<std::chrono::microseconds>(made - woken).count(),
          std::chrono::duration_cast<std::chrono::microseconds>(woken - asked_at).count());
    } catch (...) {
      // A log line that cannot be made must not end the daemon.
    }
    lock.lock();
    const auto asked = std::find(wanted_.begin(), wanted_.end(), size);
    if (generation == generation_ && asked != wanted_.end()) {
      wanted_.erase(asked);
      if (block && store_ready(size, *block)) {
        ++counted_.made;
      } else {
        uncount(size);
        // Out of memory for the list: the block goes back, and the daemon goes on.
        if (block) discard_(*block);
      }
    } else if (block) {
      discard_(*block);  // drained while it was being made: nobody counts it any more
    }
  }
}

}  // namespace gpumem::daemon
