#pragma once
/// @file
/// @brief What the request path counts: per message type, how many requests and how long each
/// took (a latency histogram), and the error replies by code.
///
/// Recording a request is on every request's path, so it is a few array increments: the slot
/// of a message type is one table lookup, the bucket of a duration a bit width, nothing is
/// allocated and no string is looked at. Rendering (metrics/collect.cpp) does the rest.

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "gpumem/proto/errc.hpp"
#include "gpumem/proto/messages.hpp"

namespace gpumem::daemon::metrics {

/// Latency buckets: upper bounds of 2^k microseconds for k = 0..20 (1 µs to about 1 s), then
/// one for everything slower.
inline constexpr std::size_t kLatencyBounds = 21;

struct latency_histogram {
  std::array<std::uint64_t, kLatencyBounds + 1> buckets{};  ///< not cumulative; last: slower
  std::uint64_t count = 0;
  std::uint64_t sum_ns = 0;
};

/// Raw message type ids below this have a slot; the table's ids must fit.
inline constexpr std::size_t kMessageSlots = 64;
/// Codes at and above the last slot share it; the errc table must fit below.
inline constexpr std::size_t kErrorSlots = 32;

namespace detail {
/// Slot 0 is every type that is no request; a request's slot is its index in kMessages + 1.
constexpr std::array<std::uint8_t, kMessageSlots> make_slots() {
  std::array<std::uint8_t, kMessageSlots> slots{};
  for (std::size_t index = 0; index < std::size(proto::kMessages); ++index) {
    slots[static_cast<std::uint16_t>(proto::kMessages[index].type)] =
        static_cast<std::uint8_t>(index + 1);
  }
  return slots;
}
constexpr bool every_request_fits() {
  return std::ranges::all_of(proto::kMessages, [](const proto::message_info& info) {
    return static_cast<std::uint16_t>(info.type) < kMessageSlots;
  });
}
static_assert(every_request_fits(), "a message id beyond kMessageSlots: raise it");
static_assert(static_cast<std::size_t>(proto::errc::wrong_state) < kErrorSlots - 1,
              "an errc beyond kErrorSlots: raise it");
}  // namespace detail

inline constexpr std::array<std::uint8_t, kMessageSlots> kSlotOfType = detail::make_slots();

/// @brief The bucket of a request that took @p nanoseconds: the first bound it does not exceed.
constexpr std::size_t latency_bucket(std::uint64_t nanoseconds) noexcept {
  const std::uint64_t microseconds = (nanoseconds + 999) / 1000;  // rounded up: bounds are <=
  return std::min<std::size_t>(std::bit_width(microseconds > 0 ? microseconds - 1 : 0),
                               kLatencyBounds);
}
static_assert(latency_bucket(0) == 0 && latency_bucket(1000) == 0 && latency_bucket(1001) == 1);
static_assert(latency_bucket(4000) == 2 && latency_bucket(4001) == 3);
static_assert(latency_bucket(std::uint64_t{1} << 40) == kLatencyBounds);

class request_counters {
 public:
  /// @brief One request of raw type @p type answered after @p took.
  void record(std::uint16_t type, std::chrono::nanoseconds took) noexcept {
    latency_histogram& histogram = by_slot_[type < kMessageSlots ? kSlotOfType[type] : 0];
    const auto nanoseconds = static_cast<std::uint64_t>(std::max<std::int64_t>(took.count(), 0));
    ++histogram.buckets[latency_bucket(nanoseconds)];
    ++histogram.count;
    histogram.sum_ns += nanoseconds;
  }
  /// @brief One error reply with @p code.
  void record_error(std::uint32_t code) noexcept {
    ++errors_[std::min<std::size_t>(code, kErrorSlots - 1)];
  }

  /// @param slot 0 for types that are no request, else the index in proto::kMessages + 1.
  const latency_histogram& of_slot(std::size_t slot) const noexcept { return by_slot_[slot]; }
  std::uint64_t errors(proto::errc code) const noexcept {
    return errors_[std::min<std::size_t>(static_cast<std::size_t>(code), kErrorSlots - 1)];
  }

 private:
  std::array<latency_histogram, std::size(proto::kMessages) + 1> by_slot_{};
  std::array<std::uint64_t, kErrorSlots> errors_{};
};

}  // namespace gpumem::daemon::metrics
