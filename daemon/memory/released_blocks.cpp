#include "memory/released_blocks.hpp"

namespace gpumem::daemon {

released_blocks::released_blocks(const cuda::driver_api& driver, CUcontext context) : cu_(driver) {
  for (marked_blocks& each : marks_) {
    cuda::check(cuda::event::create(cu_, context, CU_EVENT_DISABLE_TIMING, each.mark),
                "cuEventCreate(released blocks)");
  }
}

CUresult released_blocks::add(CUdeviceptr block, CUstream releases) noexcept {
  std::lock_guard lock(mutex_);
  // With every mark in flight, the newest is recorded again: later, so it still covers its
  // blocks, and this one too.
  const bool fresh = in_flight_ < kMarks;
  marked_blocks& into = marks_[(oldest_ + in_flight_ - (fresh ? 0 : 1)) % kMarks];
  try {
    into.blocks.push_back(block);
  } catch (...) {
    return cu_.cuMemFreeAsync(block, releases);  // behind the waits, as before marks
  }
  if (cu_.cuEventRecord(into.mark.get(), releases) != CUDA_SUCCESS) {
    // The mark still stands where it was, before this block's waits.
    into.blocks.pop_back();
    return cu_.cuMemFreeAsync(block, releases);
  }
  if (fresh) ++in_flight_;
  return CUDA_SUCCESS;
}

CUresult released_blocks::free_landed(CUstream allocations) noexcept {
  std::lock_guard lock(mutex_);
  CUresult first_error = CUDA_SUCCESS;
  // The release stream runs in order: the marks that landed are the oldest ones.
  while (in_flight_ > 0 && cu_.cuEventQuery(marks_[oldest_].mark.get()) == CUDA_SUCCESS) {
    for (const CUdeviceptr block : marks_[oldest_].blocks) {
      const CUresult freed = cu_.cuMemFreeAsync(block, allocations);
      if (first_error == CUDA_SUCCESS) first_error = freed;
    }
    marks_[oldest_].blocks.clear();
    oldest_ = (oldest_ + 1) % kMarks;
    --in_flight_;
  }
  return first_error;
}

void released_blocks::free_all(CUstream releases) noexcept {
  std::lock_guard lock(mutex_);
  for (; in_flight_ > 0; --in_flight_, oldest_ = (oldest_ + 1) % kMarks) {
    for (const CUdeviceptr block : marks_[oldest_].blocks) cu_.cuMemFreeAsync(block, releases);
    marks_[oldest_].blocks.clear();
  }
}

}  // namespace gpumem::daemon
