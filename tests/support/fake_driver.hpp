#pragma once
// A CUDA driver table for tests without a GPU: its entry points hand out made-up handles and
// keep books of what is alive, what was retained, which context is current, and every misuse
// (a handle freed twice or unknown, a stream or event destroyed outside its context). One
// entry point can be made to fail.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpumem/shared/cuda/driver.hpp"

namespace gpumem::testing {

/// The kinds of handles the fake books, one set of live handles each.
enum class kind { stream, event, pool, allocation, range, mapping, registration };

struct fake_books {
  std::map<kind, std::set<std::uintptr_t>> live;
  std::map<kind, int> made;
  std::map<CUdevice, int> retains;  ///< primary context retains outstanding, by device
  CUcontext current = nullptr;
  /// The access cuMemSetAccess last gave each mapping, by address (kept after the unmap).
  std::map<CUdeviceptr, CUmemAccess_flags> access;
  /// Device memory as 32-bit words by address: cuStreamWriteValue32 and the writes of
  /// cuStreamBatchMemOp store here at once, cuMemcpyDtoH reads from here, and a word never
  /// written reads as zero.
  std::map<CUdeviceptr, std::uint32_t> words;
  /// Streams whose work does not finish: an event recorded on one has not landed
  /// (cuEventQuery) until hold_stream lets it go.
  std::set<CUstream> held_streams;
  /// Every cuMemFreeAsync, in order: the memory and the stream it was queued on.
  std::vector<std::pair<CUdeviceptr, CUstream>> frees;
  /// Every cuStreamWaitEvent that was queued, in order: the stream and the event it waits on.
  std::vector<std::pair<CUstream, CUevent>> event_waits;
  std::vector<std::string> misuse;   ///< empty while the code under test behaves
  std::map<std::string, int> calls;  ///< of the device-work entry points, by name, since the reset
  /// The entry point (its name without _v2) that answers fail_with; empty: none fails.
  std::string failing;
  CUresult fail_with = CUDA_ERROR_OUT_OF_MEMORY;

  std::size_t live_count(kind which) const;
  int retained() const;  ///< over all devices
};

/// The books of the fake driver, fresh after reset_fake_driver().
fake_books& fake();
void reset_fake_driver();
/// The table; its entry points write to fake().
const cuda::driver_api& fake_driver();

/// Holds up the work of @p stream from now on, or lets it and every event recorded on it land.
void hold_stream(CUstream stream, bool held);

/// The context that the fake's primary context of @p device is.
CUcontext fake_primary_context(CUdevice device);

/// The word at @p offset into the one address range reserved (a signal page's), in the fake's
/// device memory (fake_books::words): what a client's stream would write there, or read.
std::uint32_t& fake_word_in_the_range(std::size_t offset);

}  // namespace gpumem::testing
