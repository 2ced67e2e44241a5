#include "gpumem/proto/wire.hpp"

#include <algorithm>
#include <cstring>

#include "gpumem/proto/errc.hpp"
#include "gpumem/proto/messages.hpp"

namespace gpumem::proto {

namespace {
// Names end up in logs, JSON and shell pipelines, so the alphabet is kept dull on purpose.
constexpr bool is_name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == ':' || c == '/' || c == '@' || c == '+';
}
}  // namespace

bool is_known_handle_type(std::uint16_t raw) noexcept {
  return raw <= static_cast<std::uint16_t>(handle_type::mailbox);
}

std::string_view wire_name::view() const noexcept {
  return {bytes, ::strnlen(bytes, kNameCapacity)};
}

std::error_code make_wire_name(std::string_view text, wire_name& out) noexcept {
  if (text.size() > kMaxNameLength || !std::all_of(text.begin(), text.end(), is_name_char)) {
    return errc::invalid_name;
  }
  out = {};
  if (!text.empty()) std::memcpy(out.bytes, text.data(), text.size());
  return {};
}

std::error_code check_wire_name(const wire_name& name, bool allow_empty) noexcept {
  const std::size_t length = ::strnlen(name.bytes, kNameCapacity);
  if (length == kNameCapacity) return errc::invalid_name;  // unterminated
  if (length == 0 && !allow_empty) return errc::invalid_name;
  if (!std::all_of(name.bytes, name.bytes + length, is_name_char)) return errc::invalid_name;
  // One memcmp, not a test per byte: an allocate request carries two names, mostly empty, so
  // the tail is most of their 128 bytes.
  static constexpr char kZeros[kNameCapacity] = {};
  if (std::memcmp(name.bytes + length, kZeros, kNameCapacity - length) != 0) {
    return errc::invalid_name;
  }
  return {};
}

const message_info* find_request(std::uint16_t raw) noexcept {
  for (const auto& info : kMessages) {
    if (static_cast<std::uint16_t>(info.type) == raw) return &info;
  }
  return nullptr;
}

}  // namespace gpumem::proto
