#pragma once
// How much slower a sanitized build runs the daemon and its clients, for the few tests that bound
// how long something may take: the bound is set for the normal build, where a stall misses it by
// an order of magnitude, and is multiplied by this in a sanitized one.

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(__SANITIZE_THREAD__)
#define __SANITIZE_THREAD__ 1
#endif
#if __has_feature(address_sanitizer) && !defined(__SANITIZE_ADDRESS__)
#define __SANITIZE_ADDRESS__ 1
#endif
#endif

namespace gpumem::testing {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
inline constexpr int kSanitizerSlowdown = 10;  // ThreadSanitizer: 5-15x on memory accesses
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
inline constexpr int kSanitizerSlowdown = 4;  // AddressSanitizer with UBSan: 2-4x
#else
inline constexpr bool kSanitized = false;
inline constexpr int kSanitizerSlowdown = 1;
#endif

}  // namespace gpumem::testing
