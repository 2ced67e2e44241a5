#pragma once
// A position- and seed-dependent fill, so a check catches stale, shifted or foreign bytes.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gpumem::testing {

// Kernels (tests/gpu) fill and check the same pattern, so the host half of a test can check
// what a kernel wrote and the reverse.
#ifdef __CUDACC__
#define GPUMEM_TEST_HOST_DEVICE __host__ __device__
#else
#define GPUMEM_TEST_HOST_DEVICE
#endif

GPUMEM_TEST_HOST_DEVICE inline std::uint8_t pattern_byte(std::size_t index, std::uint32_t seed) {
  // The seed goes in before the multiplication, which carries it into the byte kept.
  const std::uint64_t mixed = ((index + 1) + (std::uint64_t{seed} << 32)) * 0x9e3779b97f4a7c15ull;
  return static_cast<std::uint8_t>(mixed >> 56);
}

inline void fill_pattern(void* data, std::size_t size, std::uint32_t seed) {
  auto* bytes = static_cast<std::uint8_t*>(data);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = pattern_byte(i, seed);
}

/// @return the first index that differs, or size when all match.
inline std::size_t first_mismatch(const void* data, std::size_t size, std::uint32_t seed) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    if (bytes[i] != pattern_byte(i, seed)) return i;
  }
  return size;
}

}  // namespace gpumem::testing
