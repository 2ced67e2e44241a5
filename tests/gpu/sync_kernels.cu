#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpumem/device.cuh"
#include "support/pattern.hpp"
#include "sync_kernels.hpp"

namespace gpumem::testing {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

cudaStream_t native(stream_t stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}

__global__ void increment_slowly_kernel(volatile std::uint64_t* counter) {
  const std::uint64_t seen = *counter;
  __nanosleep(2000);
  *counter = seen + 1;
  __threadfence_system();
}

__global__ void count_kernel(device::lock_ref lock, volatile std::uint64_t* counter,
                             unsigned iterations) {
  for (unsigned i = 0; i < iterations; ++i) {
    device::with_lock(lock, [&] { *counter = *counter + 1; });
  }
}

__global__ void hold_kernel(device::lock_ref lock, volatile unsigned* taken) {
  device::lock(lock);
  *taken = 1;
  __threadfence_system();
  for (;;) __nanosleep(100000);
}

__global__ void probe_kernel(device::lock_ref lock, unsigned long long timeout_ns,
                             unsigned* result) {
  if (!device::try_lock_for(lock, timeout_ns)) {
    *result = 0;
    return;
  }
  *result = 1 + (device::owner_died(lock) ? 1 : 0);
  device::mark_consistent(lock);
  device::unlock(lock);
}

__global__ void write_round_kernel(std::uint32_t* slots, unsigned party, unsigned round) {
  slots[party] = round;
  __threadfence_system();
}

__global__ void check_round_kernel(const volatile std::uint32_t* slots, unsigned parties,
                                   unsigned round, unsigned long long* errors) {
  for (unsigned party = 0; party < parties; ++party) {
    if (slots[party] < round) atomicAdd(errors, 1ull);
  }
}

// Two processes alternate: each waits for its turn, then takes the lock (which the other may
// still hold: it passed the turn and is releasing), passes the turn, releases. Bounded by the
// globaltimer so that it never hangs.
__global__ void ping_pong_kernel(device::lock_ref lock, unsigned* turn, unsigned me,
                                 unsigned rounds, unsigned* done) {
  using word = cuda::atomic_ref<unsigned, cuda::thread_scope_system>;
  const unsigned long long deadline = device::detail::now_ns() + 10'000'000'000ull;
  unsigned completed = 0;
  while (completed < rounds && device::detail::now_ns() < deadline) {
    if (word(*turn).load(cuda::memory_order_relaxed) % 2 != me) continue;
    device::lock(lock);
    word(*turn).fetch_add(1, cuda::memory_order_relaxed);
    ++completed;
    device::unlock(lock);
  }
  *done = completed;
}

__global__ void spin_ping_pong_kernel(unsigned* turn, unsigned me, unsigned rounds,
                                      unsigned* done) {
  using word = cuda::atomic_ref<unsigned, cuda::thread_scope_system>;
  const unsigned long long deadline = device::detail::now_ns() + 10'000'000'000ull;
  unsigned completed = 0;
  while (completed < rounds && device::detail::now_ns() < deadline) {
    if (word(*turn).load(cuda::memory_order_acquire) % 2 == me) {
      word(*turn).fetch_add(1, cuda::memory_order_release);
      ++completed;
    }
  }
  *done = completed;
}

/// Passes items through a channel: the producer (one block) fills each item's slot with the
/// item's pattern, a consumer counts the bytes that differ from it, its blocks taking the items
/// in turn and releasing them in order.
__global__ void pass_items_kernel(device::counters_ref channel, bool producing, std::uint8_t* slots,
                                  unsigned slot_count, std::size_t slot_bytes, unsigned items,
                                  unsigned long long* errors, unsigned* outcome) {
  __shared__ bool its_turn;
  if (threadIdx.x == 0) its_turn = true;
  for (unsigned item = blockIdx.x; item < items; item += gridDim.x) {
    if (threadIdx.x == 0) {
      its_turn = producing ? device::wait_free_slot(channel, item, slot_count)
                           : device::wait_item(channel, item);
    }
    __syncthreads();
    if (!its_turn) break;
    std::uint8_t* slot = slots + std::size_t{item % slot_count} * slot_bytes;
    unsigned long long bad = 0;
    for (std::size_t i = threadIdx.x; i < slot_bytes; i += blockDim.x) {
      if (producing) {
        slot[i] = pattern_byte(i, item);
      } else {
        bad += slot[i] != pattern_byte(i, item);
      }
    }
    if (bad != 0) atomicAdd(errors, bad);
    __syncthreads();  // every thread's bytes, written or read, before the hand-on
    if (threadIdx.x == 0) {
      if (producing) {
        device::publish(channel, item + 1);
      } else {
        device::release_in_order(channel, item);
      }
      atomicMax(&outcome[0], item + 1);
    }
  }
  if (threadIdx.x == 0 && !its_turn) outcome[1] = 1;
}

__global__ void barrier_rounds_kernel(device::counters_ref barrier, volatile std::uint32_t* slots,
                                      unsigned rounds, unsigned long long* errors,
                                      unsigned* outcome) {
  for (unsigned round = 1; round <= rounds; ++round) {
    slots[barrier.party] = round;
    if (!device::arrive_and_wait(barrier, round)) {
      outcome[1] = 1;
      return;
    }
    for (unsigned party = 0; party < barrier.parties; ++party) {
      if (slots[party] < round) atomicAdd(errors, 1ull);
    }
    outcome[0] = round;
  }
}

__global__ void hand_on_kernel(device::counters_ref channel, unsigned slot_count, unsigned first,
                               unsigned until) {
  for (unsigned published = first; published < until;) {
    // Everything the slowest consumer released is free again: publish up to it at once. (A
    // dead consumer's count jumps far ahead and stops holding it back: enough for a benchmark.)
    unsigned released = published + slot_count;
    for (unsigned consumer = 1; consumer < channel.parties; ++consumer) {
      const unsigned count =
          cuda::atomic_ref<unsigned, cuda::thread_scope_system>(channel.counts[consumer])
              .load(cuda::memory_order_acquire);
      released = min(released, count + slot_count);
    }
    if (released == published) {
      if (!device::wait_free_slot(channel, published, slot_count)) return;
      continue;
    }
    published = min(released, until);
    device::publish(channel, published);
  }
}

__global__ void copy_items_kernel(device::counters_ref channel, bool through_channel,
                                  const uint4* slots, unsigned slot_count, std::size_t item_words,
                                  unsigned first, unsigned count, uint4* to) {
  __shared__ bool its_turn;
  if (threadIdx.x == 0) its_turn = true;
  uint4* out = to + std::size_t{blockIdx.x} * item_words;
  for (unsigned k = blockIdx.x; k < count; k += gridDim.x) {
    const unsigned item = first + k;
    if (through_channel && threadIdx.x == 0 && its_turn) {
      its_turn = device::wait_item(channel, item);
    }
    __syncthreads();
    if (!its_turn) return;
    const uint4* from = slots + std::size_t{item % slot_count} * item_words;
    for (std::size_t word = threadIdx.x; word < item_words; word += blockDim.x) {
      out[word] = from[word];
    }
    __syncthreads();  // every thread's reads before the release
    if (through_channel && threadIdx.x == 0) device::release_in_order(channel, item);
  }
}

/// Each block's one thread counts itself in, then waits for @p party's @p target.
__global__ void wait_for_kernel(device::counters_ref counters, unsigned party, unsigned target,
                                unsigned* started, unsigned* answers) {
  cuda::atomic_ref<unsigned, cuda::thread_scope_system>(*started).fetch_add(
      1, cuda::memory_order_relaxed);
  answers[blockIdx.x] = device::wait_for(counters, party, target) ? kWaitReached : kWaitGaveUp;
}

}  // namespace

void wait_for_in_blocks(device::counters_ref counters, unsigned party, unsigned target,
                        unsigned* started, unsigned* answers, unsigned blocks, stream_t stream) {
  wait_for_kernel<<<blocks, 1, 0, native(stream)>>>(counters, party, target, started, answers);
  check(cudaGetLastError(), "wait_for launch");
}

void hand_on_in_kernel(device::counters_ref channel, unsigned slot_count, unsigned first,
                       unsigned until, stream_t stream) {
  hand_on_kernel<<<1, 1, 0, native(stream)>>>(channel, slot_count, first, until);
  check(cudaGetLastError(), "hand-on launch");
}

void copy_items_in_kernel(const device::counters_ref* channel, const void* slots,
                          unsigned slot_count, std::size_t item_bytes, unsigned first,
                          unsigned count, void* to, unsigned blocks, stream_t stream) {
  copy_items_kernel<<<blocks, 1024, 0, native(stream)>>>(
      channel != nullptr ? *channel : device::counters_ref{}, channel != nullptr,
      static_cast<const uint4*>(slots), slot_count, item_bytes / sizeof(uint4), first, count,
      static_cast<uint4*>(to));
  check(cudaGetLastError(), "copy items launch");
}

void pass_items_in_kernel(device::counters_ref channel, bool producing, void* slots,
                          unsigned slot_count, std::size_t slot_bytes, unsigned items,
                          unsigned long long* errors, unsigned* outcome, stream_t stream,
                          unsigned blocks) {
  pass_items_kernel<<<producing ? 1 : blocks, 256, 0, native(stream)>>>(
      channel, producing, static_cast<std::uint8_t*>(slots), slot_count, slot_bytes, items, errors,
      outcome);
  check(cudaGetLastError(), "pass items launch");
}

void barrier_rounds_in_kernel(device::counters_ref barrier, std::uint32_t* slots, unsigned rounds,
                              unsigned long long* errors, unsigned* outcome, stream_t stream) {
  barrier_rounds_kernel<<<1, 1, 0, native(stream)>>>(barrier, slots, rounds, errors, outcome);
  check(cudaGetLastError(), "barrier rounds launch");
}

void spin_ping_pong(unsigned* turn, unsigned me, unsigned rounds, unsigned* done, stream_t stream) {
  spin_ping_pong_kernel<<<1, 1, 0, native(stream)>>>(turn, me, rounds, done);
  check(cudaGetLastError(), "spin ping-pong launch");
}

void increment_slowly(std::uint64_t* counter, stream_t stream) {
  increment_slowly_kernel<<<1, 1, 0, native(stream)>>>(counter);
  check(cudaGetLastError(), "increment launch");
}

void count_under_device_lock(device::lock_ref lock, std::uint64_t* counter, unsigned blocks,
                             unsigned threads, unsigned iterations, stream_t stream) {
  count_kernel<<<blocks, threads, 0, native(stream)>>>(lock, counter, iterations);
  check(cudaGetLastError(), "count launch");
}

void hold_device_lock_forever(device::lock_ref lock, unsigned* taken, stream_t stream) {
  hold_kernel<<<1, 1, 0, native(stream)>>>(lock, taken);
  check(cudaGetLastError(), "hold launch");
}

void probe_device_lock(device::lock_ref lock, unsigned long long timeout_ns, unsigned* result,
                       stream_t stream) {
  probe_kernel<<<1, 1, 0, native(stream)>>>(lock, timeout_ns, result);
  check(cudaGetLastError(), "probe launch");
}

void write_round(std::uint32_t* slots, unsigned party, unsigned round, stream_t stream) {
  write_round_kernel<<<1, 1, 0, native(stream)>>>(slots, party, round);
  check(cudaGetLastError(), "write_round launch");
}

void check_round(const std::uint32_t* slots, unsigned parties, unsigned round,
                 unsigned long long* errors, stream_t stream) {
  check_round_kernel<<<1, 1, 0, native(stream)>>>(slots, parties, round, errors);
  check(cudaGetLastError(), "check_round launch");
}

void device_lock_ping_pong(device::lock_ref lock, unsigned* turn, unsigned me, unsigned rounds,
                           unsigned* done, stream_t stream) {
  ping_pong_kernel<<<1, 1, 0, native(stream)>>>(lock, turn, me, rounds, done);
  check(cudaGetLastError(), "ping-pong launch");
}

void zero_on_device(void* data, std::size_t size, stream_t stream) {
  check(cudaMemsetAsync(data, 0, size, native(stream)), "cudaMemsetAsync");
}

void copy_to_host(void* host, const void* device, std::size_t size, stream_t stream) {
  check(cudaMemcpyAsync(host, device, size, cudaMemcpyDeviceToHost, native(stream)),
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(native(stream)), "cudaStreamSynchronize");
}

bool stream_idle(stream_t stream) {
  const cudaError_t status = cudaStreamQuery(native(stream));
  if (status == cudaErrorNotReady) return false;
  check(status, "cudaStreamQuery");
  return true;
}

void copy_on_device(void* to, const void* from, std::size_t size, stream_t stream) {
  check(cudaMemcpyAsync(to, from, size, cudaMemcpyDeviceToDevice, native(stream)),
        "cudaMemcpyAsync");
}

}  // namespace gpumem::testing
