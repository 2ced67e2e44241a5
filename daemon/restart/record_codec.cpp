#include "restart/record_codec.hpp"

#include <array>

namespace gpumem::daemon::restart {

namespace {
constexpr std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t index = 0; index < 256; ++index) {
    std::uint32_t value = index;
    for (int bit = 0; bit < 8; ++bit)
      value = (value & 1) != 0 ? 0xEDB88320u ^ (value >> 1) : value >> 1;
    table[index] = value;
  }
  return table;
}
constexpr std::array<std::uint32_t, 256> kCrcTable = make_crc_table();
}  // namespace

std::uint32_t crc32(std::span<const std::byte> bytes) noexcept {
  std::uint32_t value = 0xFFFFFFFFu;
  for (const std::byte each : bytes) {
    value = kCrcTable[(value ^ static_cast<std::uint32_t>(each)) & 0xff] ^ (value >> 8);
  }
  return value ^ 0xFFFFFFFFu;
}

}  // namespace gpumem::daemon::restart
