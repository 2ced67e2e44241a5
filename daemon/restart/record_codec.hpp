#pragma once
/// @file
/// @brief Bytes in and out for the state the daemon writes down (daemon/restart/): fixed-width
/// little-endian integers, length-prefixed strings and byte runs, and the CRC-32 that tells a
/// record written whole from a torn one. A reader never reads past its bytes: every read
/// checks the length and a short or malformed input throws format_error.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpumem::daemon::restart {

struct format_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// CRC-32 (IEEE 802.3, as zlib computes it): by carry-less multiplication where the CPU has it.
std::uint32_t crc32(std::span<const std::byte> bytes) noexcept;
/// The same CRC-32 by tables alone, as on a CPU without carry-less multiplication.
std::uint32_t crc32_by_tables(std::span<const std::byte> bytes) noexcept;
/// Whether crc32() folds with carry-less multiplication on this CPU (runs of 32 bytes or more).
bool crc32_folds() noexcept;

/// Puts little-endian integers and length-prefixed runs into a buffer whose room is kept: the
/// vector's elements are the room made so far (grown, and so zeroed, a doubling at a time) and
/// size() says how much of it is written.
class record_writer {
 public:
  record_writer() = default;
  /// @param reused a buffer whose capacity is kept; its bytes are written over.
  explicit record_writer(std::vector<std::byte> reused) : bytes_(std::move(reused)) {}

  template <class Integer>
  requires std::is_integral_v<Integer> || std::is_enum_v<Integer>
  void put(Integer value) {
    // A copy into room already made: a push_back per byte, each checking the room, was most
    // of what encoding a record cost.
    std::byte* at = grow(sizeof(Integer));
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(at, &value, sizeof(Integer));
    } else {
      auto wide = static_cast<std::uint64_t>(value);
      for (std::size_t byte = 0; byte < sizeof(Integer); ++byte) {
        at[byte] = static_cast<std::byte>(wide & 0xff);
        wide >>= 8;
      }
    }
  }
  /// Writes @p value over bytes put before, at @p offset: a length or a checksum known only
  /// once what it covers has been put.
  void put_at(std::size_t offset, std::uint32_t value) {
    if (offset > size_ || size_ - offset < sizeof value) {
      throw std::out_of_range("record_writer::put_at past the bytes put");
    }
    for (std::size_t byte = 0; byte < sizeof value; ++byte) {
      bytes_[offset + byte] = static_cast<std::byte>(value & 0xff);
      value >>= 8;
    }
  }
  void put(bool value) { put(static_cast<std::uint8_t>(value)); }
  void put_bytes(std::span<const std::byte> run) {
    put(static_cast<std::uint32_t>(run.size()));
    append(run);
  }
  /// @brief @p run as it is, with no length in front.
  void append(std::span<const std::byte> run) {
    if (!run.empty()) std::memcpy(grow(run.size()), run.data(), run.size());
  }
  /// @brief Drops what was put after the first @p size bytes.
  void truncate(std::size_t size) noexcept { size_ = std::min(size_, size); }
  void put_string(const std::string& text) {
    put_bytes(std::as_bytes(std::span(text.data(), text.size())));
  }

  std::size_t size() const noexcept { return size_; }
  std::span<const std::byte> view() const noexcept { return std::span(bytes_).first(size_); }
  /// @brief The bytes put, as a vector that keeps the room (for a record_writer to reuse).
  std::vector<std::byte> take() && {
    bytes_.resize(size_);
    size_ = 0;
    return std::move(bytes_);
  }

 private:
  /// @return where the next @p count bytes go, room made for them.
  std::byte* grow(std::size_t count) {
    if (bytes_.size() - size_ < count) {
      // Within a reused buffer's capacity, no further than the doubling: zeroing all of a
      // capacity one large batch left would cost every small batch after it.
      const std::size_t wanted = size_ + count;
      std::size_t room = std::max({bytes_.size() * 2, wanted, std::size_t{256}});
      if (wanted <= bytes_.capacity()) room = std::min(room, bytes_.capacity());
      bytes_.resize(room);
    }
    std::byte* at = bytes_.data() + size_;
    size_ += count;
    return at;
  }

  std::vector<std::byte> bytes_;
  std::size_t size_ = 0;
};

class record_reader {
 public:
  explicit record_reader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  template <class Integer>
  requires std::is_integral_v<Integer> || std::is_enum_v<Integer> Integer get() {
    const std::span<const std::byte> raw = take(sizeof(Integer));
    std::uint64_t wide = 0;
    for (std::size_t byte = sizeof(Integer); byte-- > 0;) {
      wide = wide << 8 | static_cast<std::uint64_t>(raw[byte]);
    }
    return static_cast<Integer>(wide);
  }
  bool get_bool() { return get<std::uint8_t>() != 0; }
  std::span<const std::byte> get_bytes() { return take(get<std::uint32_t>()); }
  std::string get_string() {
    const auto run = get_bytes();
    return {reinterpret_cast<const char*>(run.data()), run.size()};
  }
  /// @brief A count of items of at least @p min_item_size bytes each, checked against what is
  /// left, so that a bad count cannot make the caller reserve a huge vector.
  std::size_t get_count(std::size_t min_item_size) {
    const auto count = get<std::uint32_t>();
    if (min_item_size > 0 && count > remaining() / min_item_size) {
      throw format_error("a count larger than the record");
    }
    return count;
  }
  std::span<const std::byte> take(std::size_t size) {
    if (size > remaining()) throw format_error("a record ends early");
    const auto run = bytes_.subspan(offset_, size);
    offset_ += size;
    return run;
  }
  std::size_t remaining() const noexcept { return bytes_.size() - offset_; }

 private:
  std::span<const std::byte> bytes_;
  std::size_t offset_ = 0;
};

}  // namespace gpumem::daemon::restart
