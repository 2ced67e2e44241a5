#pragma once
// Kernels for the GPU tests and benchmarks, behind a plain C++ interface (no CUDA headers).

#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;

namespace gpumem::testing {

using stream_t = CUstream_st*;

/// @brief Why no GPU test can run here, or empty when a CUDA device is usable.
std::string why_no_gpu();

/// Number of CUDA devices (0 when none is usable).
int device_count();
/// Makes @p device current for the streams and allocations that follow.
void use_device(int device);
stream_t make_stream();
void destroy_stream(stream_t stream);
void synchronize(stream_t stream);

/// Writes the same position- and seed-dependent pattern as pattern.hpp, on the device.
void fill_on_device(void* data, std::size_t size, std::uint32_t seed, stream_t stream);
/// Counts bytes that differ from the pattern; waits for the stream.
std::uint64_t mismatches_on_device(const void* data, std::size_t size, std::uint32_t seed,
                                   stream_t stream);
/// Adds to *errors, without waiting, the bytes that differ from the pattern.
void count_mismatches(const void* data, std::size_t size, std::uint32_t seed,
                      unsigned long long* errors, stream_t stream);
/// Counts the bytes that are not zero; waits for the stream.
std::uint64_t nonzero_on_device(const void* data, std::size_t size, stream_t stream);
/// Device read bandwidth of a sum kernel over @p size bytes, in GB/s (median of @p repeats).
double read_bandwidth(const void* data, std::size_t size, stream_t stream, int repeats);

/// cudaMalloc / cudaFree, for baselines.
void* device_malloc(std::size_t size);
void device_free(void* data);

/// cudaMallocHost / cudaFreeHost and synchronous cudaMemcpy, the raw copies sleep and wake are
/// measured against.
void* pinned_malloc(std::size_t size);
void pinned_free(void* data);
void copy_to_host(void* host, const void* device, std::size_t size);
void copy_to_device(void* device, const void* host, std::size_t size);

/// A one-word write through a kernel; "" when it worked, else the CUDA error's text.
std::string try_write_on_device(void* data, stream_t stream);
/// Free memory on the current device, from cudaMemGetInfo.
std::size_t device_free_memory();

/// The legacy CUDA IPC path, the baseline the daemon is measured against.
struct legacy_ipc_handle {
  unsigned char bytes[64];
};
legacy_ipc_handle legacy_ipc_export(void* data);
void* legacy_ipc_open(const legacy_ipc_handle& handle);
void legacy_ipc_close(void* data);

}  // namespace gpumem::testing
