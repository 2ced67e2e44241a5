// Fuzz target: the codec. The input is a stream of frames; every frame that parses is decoded
// as the payload its type names (request, reply or error), and whatever decodes must encode
// back to exactly the bytes it came from, header included, and decode again. The text and name
// makers are checked on the way: what they build must pass the decoder's own checks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include "gpumem/proto/codec.hpp"
#include "payload_types.hpp"

namespace {

using namespace gpumem::proto;

[[noreturn]] void fail(const char* what, std::uint16_t type) {
  std::fprintf(stderr, "codec fuzz: %s (message type %#x)\n", what, type);
  std::abort();
}

template <class Payload>
void round_trip(const frame_view& frame, std::span<const std::byte> bytes) {
  Payload decoded{};
  if (decode_payload(frame.payload, decoded)) return;
  std::vector<std::byte> encoded;
  append_frame(encoded, frame.head.type, frame.head.request_id, decoded, frame.head.fd_count,
               static_cast<handle_type>(frame.head.handle));
  const auto original = bytes.first(frame.frame_size());
  if (encoded.size() != original.size() ||
      !std::equal(encoded.begin(), encoded.end(), original.begin())) {
    fail("a decoded frame encodes to other bytes", frame.head.type);
  }
  frame_view again;
  std::error_code error;
  if (parse_frame(encoded, again, error) != parse_status::complete) {
    fail("an encoded frame does not parse", frame.head.type);
  }
  Payload redecoded{};
  if (decode_payload(again.payload, redecoded))
    fail("an encoded payload does not decode", frame.head.type);
}

void decode_by_type(const frame_view& frame, std::span<const std::byte> bytes) {
  const bool known = gpumem::fuzz::with_payload_type(
      frame.head.type, [&]<class Payload>() { round_trip<Payload>(frame, bytes); });
  if (!known) fail("check_header accepted a type the table does not name", frame.head.type);
}

void check_makers(std::span<const std::byte> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()),
                              std::min<std::size_t>(bytes.size(), 2 * kErrorTextCapacity));
  const error_reply made = make_error_reply(errc::internal, text);
  if (validate(made)) fail("make_error_reply built a reply that does not validate", 0);
  wire_name name{};
  if (!make_wire_name(text.substr(0, kNameCapacity + 1), name) &&
      check_wire_name(name, /*allow_empty=*/true)) {
    fail("make_wire_name accepted a name that check_wire_name refuses", 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  check_makers(input);
  std::span<const std::byte> rest = input;
  for (;;) {
    frame_view frame;
    std::error_code error;
    if (parse_frame(rest, frame, error) != parse_status::complete) break;
    decode_by_type(frame, rest);
    rest = rest.subspan(frame.frame_size());
  }
  return 0;
}
