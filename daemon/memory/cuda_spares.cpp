#include "memory/cuda_spares.hpp"

#include <algorithm>
#include <utility>

namespace gpumem::daemon {

cuda_spares::cuda_spares(maker make, discarder discard)
    : make_(std::move(make)), discard_(std::move(discard)), worker_([this] { work(); }) {}

void cuda_spares::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (worker_.joinable()) worker_.join();
}

std::optional<exported_block> cuda_spares::take(std::uint64_t size) {
  std::lock_guard lock(mutex_);
  const auto found = ready_.find(size);
  if (found == ready_.end()) return std::nullopt;
  const exported_block block = found->second;
  ready_.erase(found);
  bytes_ -= size;
  return block;
}

void cuda_spares::want(std::uint64_t size, std::uint64_t room) {
  {
    std::lock_guard lock(mutex_);
    const bool known =
        ready_.contains(size) || std::find(wanted_.begin(), wanted_.end(), size) != wanted_.end();
    if (known || size > kMaxBlockSize || ready_.size() + wanted_.size() >= kMaxSizes ||
        bytes_ + size > room) {
      return;
    }
    wanted_.push_back(size);
    bytes_ += size;
    unstarted_ = true;
  }
}

void cuda_spares::start_wanted() noexcept {
  {
    std::lock_guard lock(mutex_);
    if (!std::exchange(unstarted_, false)) return;
  }
  wake_.notify_one();
}

std::vector<std::pair<std::uint64_t, exported_block>> cuda_spares::drain() {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<std::uint64_t, exported_block>> blocks(ready_.begin(), ready_.end());
  ready_.clear();
  wanted_.clear();
  bytes_ = 0;
  ++generation_;
  return blocks;
}

std::uint64_t cuda_spares::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

void cuda_spares::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || (!wanted_.empty() && !unstarted_); });
    if (stopping_) return;
    const std::uint64_t size = wanted_.back();
    const std::uint64_t generation = generation_;
    lock.unlock();
    const std::optional<exported_block> block = make_(size);
    lock.lock();
    const auto asked = std::find(wanted_.begin(), wanted_.end(), size);
    if (generation == generation_ && asked != wanted_.end()) {
      wanted_.erase(asked);
      if (block) {
        ready_.emplace(size, *block);
      } else {
        bytes_ -= size;
      }
    } else if (block) {
      discard_(*block);  // drained while it was being made: nobody counts it any more
    }
  }
}

}  // namespace gpumem::daemon
