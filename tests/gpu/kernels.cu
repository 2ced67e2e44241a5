#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels.hpp"
#include "support/pattern.hpp"

namespace gpumem::testing {

namespace {
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

__global__ void fill(std::uint8_t* data, std::size_t size, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < size;
       i += std::size_t{gridDim.x} * blockDim.x) {
    data[i] = pattern_byte(i, seed);
  }
}

__global__ void compare(const std::uint8_t* data, std::size_t size, std::uint32_t seed,
                        unsigned long long* bad) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < size;
       i += std::size_t{gridDim.x} * blockDim.x) {
    local += data[i] != pattern_byte(i, seed);
  }
  if (local != 0) atomicAdd(bad, local);
}

__global__ void count_nonzero(const std::uint8_t* data, std::size_t size,
                              unsigned long long* nonzero) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < size;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    mine += data[i] != 0;
  }
  if (mine != 0) atomicAdd(nonzero, mine);
}

__global__ void sum(const uint4* data, std::size_t count, unsigned long long* out) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const uint4 v = data[i];
    local += v.x ^ v.w;
  }
  if (local == 42) atomicAdd(out, local);  // keeps the loads alive, almost never writes
}

__global__ void poke(unsigned* data) {
  data[0] = 0xdeadbeef;
}

cudaStream_t native(stream_t stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}
}  // namespace

std::string why_no_gpu() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess)
    return std::string("no usable CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device";
  return {};
}

int device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

void use_device(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
}

stream_t make_stream() {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return reinterpret_cast<stream_t>(stream);
}

void destroy_stream(stream_t stream) {
  cudaStreamDestroy(native(stream));
}

void synchronize(stream_t stream) {
  check(cudaStreamSynchronize(native(stream)), "cudaStreamSynchronize");
}

void fill_on_device(void* data, std::size_t size, std::uint32_t seed, stream_t stream) {
  fill<<<1024, 256, 0, native(stream)>>>(static_cast<std::uint8_t*>(data), size, seed);
  check(cudaGetLastError(), "fill launch");
}

void count_mismatches(const void* data, std::size_t size, std::uint32_t seed,
                      unsigned long long* errors, stream_t stream) {
  compare<<<1024, 256, 0, native(stream)>>>(static_cast<const std::uint8_t*>(data), size, seed,
                                            errors);
  check(cudaGetLastError(), "compare launch");
}

std::uint64_t mismatches_on_device(const void* data, std::size_t size, std::uint32_t seed,
                                   stream_t stream) {
  unsigned long long* bad = nullptr;
  check(cudaMallocAsync(&bad, sizeof *bad, native(stream)), "cudaMallocAsync");
  check(cudaMemsetAsync(bad, 0, sizeof *bad, native(stream)), "cudaMemsetAsync");
  count_mismatches(data, size, seed, bad, stream);
  unsigned long long result = 0;
  check(cudaMemcpyAsync(&result, bad, sizeof result, cudaMemcpyDeviceToHost, native(stream)),
        "cudaMemcpyAsync");
  check(cudaFreeAsync(bad, native(stream)), "cudaFreeAsync");
  synchronize(stream);
  return result;
}

std::uint64_t nonzero_on_device(const void* data, std::size_t size, stream_t stream) {
  unsigned long long* found = nullptr;
  check(cudaMallocAsync(&found, sizeof *found, native(stream)), "cudaMallocAsync");
  check(cudaMemsetAsync(found, 0, sizeof *found, native(stream)), "cudaMemsetAsync");
  count_nonzero<<<1024, 256, 0, native(stream)>>>(static_cast<const std::uint8_t*>(data), size,
                                                  found);
  check(cudaGetLastError(), "count_nonzero launch");
  unsigned long long result = 0;
  check(cudaMemcpyAsync(&result, found, sizeof result, cudaMemcpyDeviceToHost, native(stream)),
        "cudaMemcpyAsync");
  check(cudaFreeAsync(found, native(stream)), "cudaFreeAsync");
  synchronize(stream);
  return result;
}

double read_bandwidth(const void* data, std::size_t size, stream_t stream, int repeats) {
  unsigned long long* out = nullptr;
  check(cudaMalloc(&out, sizeof *out), "cudaMalloc");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  const auto* words = static_cast<const uint4*>(data);
  const std::size_t count = size / sizeof(uint4);
  sum<<<1056, 512, 0, native(stream)>>>(words, count, out);  // warm-up
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    check(cudaEventRecord(start, native(stream)), "cudaEventRecord");
    sum<<<1056, 512, 0, native(stream)>>>(words, count, out);
    check(cudaEventRecord(stop, native(stream)), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    rates.push_back(static_cast<double>(count * sizeof(uint4)) / (ms * 1e-3) / 1e9);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(out);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

void* device_malloc(std::size_t size) {
  void* data = nullptr;
  check(cudaMalloc(&data, size), "cudaMalloc");
  return data;
}

void device_free(void* data) {
  check(cudaFree(data), "cudaFree");
}

void* pinned_malloc(std::size_t size) {
  void* data = nullptr;
  check(cudaMallocHost(&data, size), "cudaMallocHost");
  return data;
}

void pinned_free(void* data) {
  check(cudaFreeHost(data), "cudaFreeHost");
}

void copy_to_host(void* host, const void* device, std::size_t size) {
  check(cudaMemcpy(host, device, size, cudaMemcpyDeviceToHost), "cudaMemcpy device to host");
}

void copy_to_device(void* device, const void* host, std::size_t size) {
  check(cudaMemcpy(device, host, size, cudaMemcpyHostToDevice), "cudaMemcpy host to device");
}

std::string try_write_on_device(void* data, stream_t stream) {
  poke<<<1, 1, 0, native(stream)>>>(static_cast<unsigned*>(data));
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) status = cudaStreamSynchronize(native(stream));
  return status == cudaSuccess ? "" : cudaGetErrorString(status);
}

std::size_t device_free_memory() {
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

legacy_ipc_handle legacy_ipc_export(void* data) {
  cudaIpcMemHandle_t handle{};
  check(cudaIpcGetMemHandle(&handle, data), "cudaIpcGetMemHandle");
  legacy_ipc_handle out{};
  static_assert(sizeof out.bytes == sizeof handle);
  memcpy(out.bytes, &handle, sizeof handle);
  return out;
}

void* legacy_ipc_open(const legacy_ipc_handle& in) {
  cudaIpcMemHandle_t handle{};
  memcpy(&handle, in.bytes, sizeof handle);
  void* data = nullptr;
  check(cudaIpcOpenMemHandle(&data, handle, cudaIpcMemLazyEnablePeerAccess),
        "cudaIpcOpenMemHandle");
  return data;
}

void legacy_ipc_close(void* data) {
  check(cudaIpcCloseMemHandle(data), "cudaIpcCloseMemHandle");
}

}  // namespace gpumem::testing
