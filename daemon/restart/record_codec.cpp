#include "restart/record_codec.hpp"

#include <array>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gpumem::daemon::restart {

namespace {
// Slicing by 8 (tables[k] advances a byte's remainder by k more zero bytes): eight independent
// lookups per 8 bytes instead of a chain of eight dependent ones. The tables checksum what the
// folding below does not: runs under 32 bytes, the folding's last 16 bytes and its tail, and
// everything on a CPU without carry-less multiplication.
using crc_tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr crc_tables make_crc_tables() {
  crc_tables tables{};
  for (std::uint32_t index = 0; index < 256; ++index) {
    std::uint32_t value = index;
    for (int bit = 0; bit < 8; ++bit) {
      value = (value & 1) != 0 ? 0xEDB88320u ^ (value >> 1) : value >> 1;
    }
    tables[0][index] = value;
  }
  for (std::size_t slice = 1; slice < tables.size(); ++slice) {
    for (std::uint32_t index = 0; index < 256; ++index) {
      const std::uint32_t previous = tables[slice - 1][index];
      tables[slice][index] = (previous >> 8) ^ tables[0][previous & 0xff];
    }
  }
  return tables;
}
constexpr crc_tables kCrcTables = make_crc_tables();

constexpr std::uint32_t little_endian_word(const std::byte* at) noexcept {
  return static_cast<std::uint32_t>(at[0]) | static_cast<std::uint32_t>(at[1]) << 8 |
         static_cast<std::uint32_t>(at[2]) << 16 | static_cast<std::uint32_t>(at[3]) << 24;
}

/// @p remainder (zlib's running value, inverted) advanced over @p left bytes at @p at.
std::uint32_t table_update(std::uint32_t remainder, const std::byte* at,
                           std::size_t left) noexcept {
  const auto& t = kCrcTables;
  for (; left >= 8; at += 8, left -= 8) {
    const std::uint32_t low = little_endian_word(at) ^ remainder;
    const std::uint32_t high = little_endian_word(at + 4);
    remainder = t[7][low & 0xff] ^ t[6][(low >> 8) & 0xff] ^ t[5][(low >> 16) & 0xff] ^
                t[4][low >> 24] ^ t[3][high & 0xff] ^ t[2][(high >> 8) & 0xff] ^
                t[1][(high >> 16) & 0xff] ^ t[0][high >> 24];
  }
  for (; left > 0; ++at, --left) {
    remainder = t[0][(remainder ^ static_cast<std::uint32_t>(*at)) & 0xff] ^ (remainder >> 8);
  }
  return remainder;
}

#if defined(__x86_64__)
// Folding with carry-less multiplication (PCLMULQDQ), 16 bytes a step, where the tables take
// a byte a cycle or more: with the tables, the checksum was half of what writing a request's
// changes down cost. In the reflected order of this CRC, 16 bytes loaded little-endian are a
// polynomial whose first byte's low bit is the highest power, x^127; the low 64 bits hold the
// half H of powers x^127..x^64, the high 64 bits the half L of x^63..x^0. Moving the
// accumulated value 128 bits on, to lie under the next 16 bytes, multiplies it by x^128:
//   (H x^64 + L) x^128 = H x^192 + L x^128 = H (x^191 mod P) x + L (x^127 mod P) x  (mod P),
// and a carry-less product of two reflected 64-bit values is their product times x, reflected
// in 128 bits, so each half is multiplied by x^191 mod P or x^127 mod P as they are.

/// x^power mod P, P the CRC-32 polynomial (x^32 + 0x04C11DB7), bit d the coefficient of x^d.
constexpr std::uint64_t x_power_mod_p(unsigned power) {
  std::uint64_t value = 1;
  for (unsigned step = 0; step < power; ++step) {
    value <<= 1;
    if ((value >> 32) != 0) value ^= 0x1'04C1'1DB7ull;
  }
  return value;
}
/// A polynomial of degree below 64 in the reflected order: the coefficient of x^d at bit 63 - d.
constexpr std::uint64_t reflected(std::uint64_t polynomial) {
  std::uint64_t out = 0;
  for (unsigned degree = 0; degree < 64; ++degree) {
    if (((polynomial >> degree) & 1) != 0) out |= std::uint64_t{1} << (63 - degree);
  }
  return out;
}
constexpr std::uint64_t kFoldHigh = reflected(x_power_mod_p(191));
constexpr std::uint64_t kFoldLow = reflected(x_power_mod_p(127));

/// As table_update(), for at least 16 bytes, on a CPU with PCLMULQDQ.
[[gnu::target("pclmul")]] std::uint32_t folded_update(std::uint32_t remainder, const std::byte* at,
                                                      std::size_t left) noexcept {
  const auto load = [](const std::byte* from) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
  };
  // The running remainder goes into the first four bytes, as the tables take it.
  __m128i value = _mm_xor_si128(load(at), _mm_cvtsi32_si128(static_cast<int>(remainder)));
  at += 16;
  left -= 16;
  const __m128i factors =
      _mm_set_epi64x(static_cast<long long>(kFoldLow), static_cast<long long>(kFoldHigh));
  for (; left >= 16; at += 16, left -= 16) {
    const __m128i high_half = _mm_clmulepi64_si128(value, factors, 0x00);
    const __m128i low_half = _mm_clmulepi64_si128(value, factors, 0x11);
    value = _mm_xor_si128(_mm_xor_si128(high_half, low_half), load(at));
  }
  // The last 16 bytes' worth, reduced to a remainder by the tables from zero.
  alignas(16) std::byte last[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(last), value);
  return table_update(table_update(0, last, sizeof last), at, left);
}

bool cpu_folds() noexcept {
  static const bool folds = __builtin_cpu_supports("pclmul");
  return folds;
}
#endif
}  // namespace

bool crc32_folds() noexcept {
#if defined(__x86_64__)
  return cpu_folds();
#else
  return false;
#endif
}

std::uint32_t crc32(std::span<const std::byte> bytes) noexcept {
#if defined(__x86_64__)
  // Below 32 bytes the folding saves less than its last 16 bytes through the tables cost.
  if (bytes.size() >= 32 && cpu_folds()) {
    return folded_update(0xFFFFFFFFu, bytes.data(), bytes.size()) ^ 0xFFFFFFFFu;
  }
#endif
  return crc32_by_tables(bytes);
}

std::uint32_t crc32_by_tables(std::span<const std::byte> bytes) noexcept {
  return table_update(0xFFFFFFFFu, bytes.data(), bytes.size()) ^ 0xFFFFFFFFu;
}

}  // namespace gpumem::daemon::restart
