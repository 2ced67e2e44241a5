#pragma once
/// @file
/// @brief The uncontended Lock::lock() and Lock::unlock(), inlined into the caller: one
/// compare-and-swap each on the lock's shared word, and no store in between.
///
/// Why inline, and why no store: on an H200 host's Xeon, two compare-and-swaps in a row cost
/// about 15 ns, one plain store anywhere between them 4-5 ns more, and a call and its return
/// (which store and load the return address) as much again or more; the development VM is
/// alike. A lock + unlock that called into the library and stored its guess of the word took
/// 20-24 ns there against 10.5-12 for a CAS lock; inline and storeless it costs what the pair
/// of compare-and-swaps does (bench/sync.cpp prints both).
///
/// So the word must come back to the same value after an uncontended lock + unlock, and this
/// process must know that value without loading the word (a load just after a locked
/// instruction on the same line waits for it). The library's lock word does both: taken
/// alone, it only gains this process's owner bits, and released alone, it loses them again
/// (gpumem/shared/sync/layout.hpp, lock_word). The value is a guess the library's slow path
/// writes when it takes the lock alone; a wrong guess only fails the compare-and-swap, and the
/// caller then takes the slow path. (Unless the word comes back to an old guess while a
/// thread that read it is preempted, after 65,536 contended hand-offs: it then holds the lock
/// under a hold the slow path has since replaced, and its unlock() throws not_lock_owner.)

#include <atomic>
#include <cstdint>

namespace gpumem::detail {

class lock_fast_path {
 public:
  /// No guess: the compare-and-swaps expect a word no lock holds (unknown flags set), so both
  /// fast paths fail until the slow path takes the lock alone again.
  static constexpr std::uint64_t kNoGuess = ~std::uint64_t{0};

  lock_fast_path() = default;
  lock_fast_path(const lock_fast_path&) = delete;
  lock_fast_path& operator=(const lock_fast_path&) = delete;

  /// Before any use: the lock's word on the shared page, and this process's owner bits.
  void bind(std::uint64_t& word, std::uint64_t owner_bits) noexcept {
    word_ = &word;
    owner_bits_ = owner_bits;
  }

  /// Takes the lock if it is free and as guessed: no waiter, no flags, same epoch.
  bool try_lock() noexcept {
    std::uint64_t expected = free_word_.load(std::memory_order_relaxed);
    return std::atomic_ref<std::uint64_t>(*word_).compare_exchange_strong(
        expected, expected | owner_bits_, std::memory_order_acquire, std::memory_order_relaxed);
  }
  /// Releases a hold taken alone that nobody queued behind since.
  bool try_unlock() noexcept {
    const std::uint64_t free = free_word_.load(std::memory_order_relaxed);
    std::uint64_t expected = free | owner_bits_;
    return std::atomic_ref<std::uint64_t>(*word_).compare_exchange_strong(
        expected, free, std::memory_order_release, std::memory_order_relaxed);
  }

  /// For the slow path, holding the lock alone: the word it returns to when released.
  void guess(std::uint64_t free_word) noexcept {
    free_word_.store(free_word, std::memory_order_relaxed);
  }

 private:
  std::uint64_t* word_ = nullptr;
  std::uint64_t owner_bits_ = 0;
  /// Written only by holders (in the slow path) and read by the next, so the lock's own
  /// acquire and release order it; atomic because other threads guess from it meanwhile.
  std::atomic<std::uint64_t> free_word_{kNoGuess};
};

}  // namespace gpumem::detail
