#include "memory/released_blocks.hpp"

#include <stdexcept>
#include <utility>

namespace gpumem::daemon {

released_blocks::released_blocks(const cuda::driver_api& driver, CUcontext context,
                                 reuse reuse_landed)
    : cu_(driver), reuse_(std::move(reuse_landed)) {
  if (!reuse_) throw std::invalid_argument("released_blocks: no reuse for landed blocks");
  for (marked_blocks& each : marks_) {
    cuda::check(cuda::event::create(cu_, context, CU_EVENT_DISABLE_TIMING, each.mark),
                "cuEventCreate(released blocks)");
  }
}

failed_call released_blocks::add(const exported_block& block, std::uint64_t size,
                                 CUstream releases) noexcept {
  std::lock_guard lock(mutex_);
  // With every mark in flight, the newest is recorded again: later, so it still covers its
  // blocks, and this one too.
  const bool fresh = in_flight_ < kMarks;
  marked_blocks& into =
      marks_[fresh ? (oldest_ + in_flight_) % kMarks : (oldest_ + kMarks - 1) % kMarks];
  const auto free_behind_the_waits = [&](failed_call why) {
    if (const CUresult freed = cu_.cuMemFreeAsync(block.pointer, releases); freed != CUDA_SUCCESS) {
      return failed_call{"cuMemFreeAsync", freed};
    }
    return why;
  };
  try {
    into.blocks.push_back({block, size});
  } catch (...) {
    return free_behind_the_waits({});
  }
  if (const CUresult recorded = cu_.cuEventRecord(into.mark.get(), releases);
      recorded != CUDA_SUCCESS) {
    // The mark still stands where it was, before this block's waits.
    into.blocks.pop_back();
    return free_behind_the_waits({"cuEventRecord", recorded});
  }
  if (fresh) ++in_flight_;
  return {};
}

failed_call released_blocks::reuse_or_free_landed(CUstream allocations) noexcept {
  return settle_landed(allocations, true);
}

failed_call released_blocks::free_landed(CUstream allocations) noexcept {
  return settle_landed(allocations, false);
}

failed_call released_blocks::settle_landed(CUstream allocations, bool offer) noexcept {
  std::lock_guard lock(mutex_);
  failed_call first;
  // The release stream runs in order: the marks that landed are the oldest ones.
  while (in_flight_ > 0) {
    const CUresult landed = cu_.cuEventQuery(marks_[oldest_].mark.get());
    if (landed == CUDA_ERROR_NOT_READY) break;
    if (landed != CUDA_SUCCESS) return first ? first : failed_call{"cuEventQuery", landed};
    if (const failed_call failed = free_oldest(allocations, offer); failed && !first) {
      first = failed;
    }
  }
  return first;
}

void released_blocks::free_all(CUstream releases) noexcept {
  std::lock_guard lock(mutex_);
  while (in_flight_ > 0) free_oldest(releases, false);
}

failed_call released_blocks::free_oldest(CUstream stream, bool offer) noexcept {
  failed_call first;
  for (const released& each : marks_[oldest_].blocks) {
    if (offer && reuse_(each.size, each.block)) continue;
    const CUresult freed = cu_.cuMemFreeAsync(each.block.pointer, stream);
    if (freed != CUDA_SUCCESS && !first) first = {"cuMemFreeAsync", freed};
  }
  marks_[oldest_].blocks.clear();
  oldest_ = (oldest_ + 1) % kMarks;
  --in_flight_;
  return first;
}

}  // namespace gpumem::daemon
