#pragma once
// How much slower a sanitized build runs the daemon and its clients, for the few tests that bound
// how long something may take: the bound is set for the normal build, where a stall misses it by
// an order of magnitude, and is multiplied by this in a sanitized one.

// GCC says so with __SANITIZE_*__, clang with __has_feature.
#if defined(__has_feature)
#define GPUMEM_TEST_HAS_FEATURE(name) __has_feature(name)
#else
#define GPUMEM_TEST_HAS_FEATURE(name) 0
#endif

namespace gpumem::testing {

#if defined(__SANITIZE_THREAD__) || GPUMEM_TEST_HAS_FEATURE(thread_sanitizer)
inline constexpr bool kSanitized = true;
inline constexpr int kSanitizerSlowdown = 10;  // ThreadSanitizer: 5-15x on memory accesses
#elif defined(__SANITIZE_ADDRESS__) || GPUMEM_TEST_HAS_FEATURE(address_sanitizer)
inline constexpr bool kSanitized = true;
inline constexpr int kSanitizerSlowdown = 4;  // AddressSanitizer with UBSan: 2-4x
#else
inline constexpr bool kSanitized = false;
inline constexpr int kSanitizerSlowdown = 1;
#endif

}  // namespace gpumem::testing
