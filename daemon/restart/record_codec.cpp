#include "restart/record_codec.hpp"

#include <array>

namespace gpumem::daemon::restart {

namespace {
// Slicing by 8 (tables[k] advances a byte's remainder by k more zero bytes): eight independent
// lookups per 8 bytes instead of a chain of eight dependent ones. Every request that changes
// the state checksums its journal batch, and the byte-at-a-time loop was a quarter of what
// keeping the state cost a request on the development VM.
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
}  // namespace

std::uint32_t crc32(std::span<const std::byte> bytes) noexcept {
  const auto& t = kCrcTables;
  std::uint32_t value = 0xFFFFFFFFu;
  const std::byte* at = bytes.data();
  std::size_t left = bytes.size();
  for (; left >= 8; at += 8, left -= 8) {
    const std::uint32_t low = little_endian_word(at) ^ value;
    const std::uint32_t high = little_endian_word(at + 4);
    value = t[7][low & 0xff] ^ t[6][(low >> 8) & 0xff] ^ t[5][(low >> 16) & 0xff] ^
            t[4][low >> 24] ^ t[3][high & 0xff] ^ t[2][(high >> 8) & 0xff] ^
            t[1][(high >> 16) & 0xff] ^ t[0][high >> 24];
  }
  for (; left > 0; ++at, --left) {
    value = t[0][(value ^ static_cast<std::uint32_t>(*at)) & 0xff] ^ (value >> 8);
  }
  return value ^ 0xFFFFFFFFu;
}

}  // namespace gpumem::daemon::restart
