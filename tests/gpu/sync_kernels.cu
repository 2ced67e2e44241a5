#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpumem/device.cuh"
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

}  // namespace

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
