#include <cstddef>
#include <limits>
#include <string>

#include "barrier_status.hpp"
#include "connection.hpp"
#include "cuda_sync.hpp"
#include "gpumem/shared/sync/host_counters.hpp"
#include "gpumem/sync.hpp"
#include "sync_object.hpp"

namespace gpumem {

using detail::cuda_sync::wait_kind;

namespace {

constexpr std::uint32_t kProducer = 0;
/// A producer leads a consumer by its slots at most, and a kernel takes a count half of
/// kBrokenLead past its target for the daemon's jump of a dead party (gpumem/device.cuh).
constexpr std::uint32_t kMostSlots = 1u << 24;
static_assert(kMostSlots < device::kBrokenLead / 2);

}  // namespace

struct Channel::state {
  state(std::shared_ptr<detail::connection> link, std::string_view name, bool producing,
        const ChannelOptions& options, Buffer slots_buffer)
      : object(std::move(link), name, options.mode, proto::sync_kind::channel,
               options.consumers + 1,
               producing ? proto::sync_role::producer : proto::sync_role::consumer,
               proto::channel_layout{options.slot_bytes, options.slots, 0}),
        counters(object.cell<sync::counter_cell>()),
        buffer(std::move(slots_buffer)),
        slots(options.slots),
        slot_bytes(options.slot_bytes),
        producer(producing) {}

  void* slot_data(std::uint64_t sequence) const {
    return static_cast<std::byte*>(buffer.data()) + (sequence % slots) * slot_bytes;
  }
  std::uint64_t count_address(int device, std::uint32_t party) {
    return object.signal_word(device,
                              offsetof(sync::signal_cell, counts) + party * sizeof(std::uint32_t));
  }
  /// The producer may refill the slots of items next .. next + count - 1 once every consumer
  /// released the items that used them before.
  std::uint32_t reuse_target(std::uint32_t count) const {
    return static_cast<std::uint32_t>(next + count - slots);
  }
  void check_role(bool wants_producer, const char* call) const {
    if (producer != wants_producer) {
      throw Error(errc::invalid_argument,
                  std::string(call) + " on channel '" + object.name() + "': only its " +
                      (wants_producer ? "producer" : "consumers") + " may call it");
    }
  }
  void check_turn(bool wants_held, const char* call) const {
    if ((held != 0) != wants_held) {
      throw Error(errc::invalid_argument,
                  std::string(call) + " on channel '" + object.name() +
                      (wants_held ? "': no slot is held" : "': the previous slot is still held"));
    }
  }
  /// For the batched forms: @p count items to take (at most every slot) or to hand on (at
  /// most those held).
  void check_count(std::uint32_t count, bool handing_on, const char* call) const {
    const std::uint32_t most = handing_on ? held : slots;
    if (count == 0 || count > most) {
      throw Error(errc::invalid_argument,
                  std::string(call) + " on channel '" + object.name() + "': a count of " +
                      std::to_string(count) + " items; it must be 1 to " + std::to_string(most) +
                      (handing_on ? " (the items held)" : " (the channel's slots)"));
    }
  }

  detail::sync_object object;
  sync::host_counters counters;
  Buffer buffer;
  std::uint32_t slots;
  std::size_t slot_bytes;
  bool producer;
  std::uint64_t next = 0;  ///< the oldest item this party holds, or the next it takes
  std::uint32_t held = 0;  ///< items acquired and not yet handed on
};

Channel::Channel() noexcept = default;
Channel::Channel(std::unique_ptr<state> made) : state_(std::move(made)) {}
Channel::Channel(Channel&&) noexcept = default;
Channel& Channel::operator=(Channel&&) noexcept = default;
Channel::~Channel() = default;

Channel::Slot Channel::acquire_slot() {
  detail::check_usable(state_.get(), "Channel");
  state_->check_role(true, "acquire_slot");
  state_->check_turn(false, "acquire_slot");
  state_->object.enter(sync::domain::host);
  for (std::uint32_t consumer = 1; consumer < state_->counters.parties(); ++consumer) {
    const BarrierStatus waited =
        detail::barrier_status_of(state_->counters.wait_for(consumer, state_->reuse_target(1)));
    if (waited != BarrierStatus::ok) return {nullptr, state_->next, waited};
  }
  state_->held = 1;
  return {state_->slot_data(state_->next), state_->next, BarrierStatus::ok};
}

void Channel::publish() {
  detail::check_usable(state_.get(), "Channel");
  state_->check_role(true, "publish");
  state_->check_turn(true, "publish");
  state_->counters.publish(kProducer, static_cast<std::uint32_t>(++state_->next));
  --state_->held;
}

Channel::Slot Channel::acquire() {
  detail::check_usable(state_.get(), "Channel");
  state_->check_role(false, "acquire");
  state_->check_turn(false, "acquire");
  state_->object.enter(sync::domain::host);
  const auto published = static_cast<std::uint32_t>(state_->next + 1);
  const BarrierStatus waited =
      detail::barrier_status_of(state_->counters.wait_for(kProducer, published));
  if (waited != BarrierStatus::ok) return {nullptr, state_->next, waited};
  state_->held = 1;
  return {state_->slot_data(state_->next), state_->next, BarrierStatus::ok};
}

void Channel::release() {
  detail::check_usable(state_.get(), "Channel");
  state_->check_role(false, "release");
  state_->check_turn(true, "release");
  state_->counters.publish(state_->object.party(), static_cast<std::uint32_t>(++state_->next));
  --state_->held;
}

// One item at a time: kept beside the counted forms, which came later, for programs linked
// against libgpumem.so.0 before them (scripts/abi-check).
Channel::Slot Channel::acquire_slot(Stream stream) {
  return acquire_slot(stream, 1);
}
void Channel::publish(Stream stream) {
  publish(stream, 1);
}
Channel::Slot Channel::acquire(Stream stream) {
  return acquire(stream, 1);
}
void Channel::release(Stream stream) {
  release(stream, 1);
}

Channel::Slot Channel::acquire_slot(Stream stream, std::uint32_t count) {
  detail::check_usable(state_.get(), "Channel");
  state_->check_role(true, "acquire_slot");
  state_->check_turn(false, "acquire_slot");
  state_->check_count(count, false, "acquire_slot");
  detail::cuda_sync::stream_ops ops(stream);
  state_->object.enter(sync::domain::device, ops.device());
  for (std::uint32_t consumer = 1; consumer < state_->object.parties(); ++consumer) {
    ops.wait_value(state_->count_address(ops.device(), consumer), state_->reuse_target(count),
                   wait_kind::at_least);
  }
  state_->held = count;
  return {state_->slot_data(state_->next), state_->next, BarrierStatus::ok};
}

void Channel::publish(Stream stream, std::uint32_t count) {
  detail::check_usable(state_.get(), "Channel");
  state_->check_role(true, "publish");
  state_->check_turn(true, "publish");
  state_->check_count(count, true, "publish");
  detail::cuda_sync::stream_ops ops(stream);
  state_->next += count;
  state_->held -= count;
  ops.write_value(state_->count_address(ops.device(), kProducer),
                  static_cast<std::uint32_t>(state_->next));
}

Channel::Slot Channel::acquire(Stream stream, std::uint32_t count) {
  detail::check_usable(state_.get(), "Channel");
  state_->check_role(false, "acquire");
  state_->check_turn(false, "acquire");
  state_->check_count(count, false, "acquire");
  detail::cuda_sync::stream_ops ops(stream);
  state_->object.enter(sync::domain::device, ops.device());
  ops.wait_value(state_->count_address(ops.device(), kProducer),
                 static_cast<std::uint32_t>(state_->next + count), wait_kind::at_least);
  state_->held = count;
  return {state_->slot_data(state_->next), state_->next, BarrierStatus::ok};
}

void Channel::release(Stream stream, std::uint32_t count) {
  detail::check_usable(state_.get(), "Channel");
  state_->check_role(false, "release");
  state_->check_turn(true, "release");
  state_->check_count(count, true, "release");
  detail::cuda_sync::stream_ops ops(stream);
  state_->next += count;
  state_->held -= count;
  ops.write_value(state_->count_address(ops.device(), state_->object.party()),
                  static_cast<std::uint32_t>(state_->next));
}

void* Channel::slot_data(std::uint64_t sequence) const {
  detail::check_usable(state_.get(), "Channel");
  return state_->slot_data(sequence);
}

device::counters_ref Channel::device(int device) {
  detail::check_usable(state_.get(), "Channel");
  return state_->object.counters_on(device);
}

bool Channel::producer() const noexcept {
  return state_ != nullptr && state_->producer;
}

bool Channel::broken() const noexcept {
  return state_ != nullptr && state_->counters.broken();
}

std::uint32_t Channel::slots() const noexcept {
  return state_ ? state_->slots : 0;
}

std::size_t Channel::slot_bytes() const noexcept {
  return state_ ? state_->slot_bytes : 0;
}

Buffer& Channel::buffer() noexcept {
  return state_->buffer;
}

Channel Client::channel(std::string_view name, ChannelRole role, const ChannelOptions& options) {
  if (options.slots == 0 || options.slots > kMostSlots || options.slot_bytes == 0 ||
      options.consumers == 0 || options.consumers >= sync::kMaxParties) {
    throw Error(errc::invalid_argument,
                "channel '" + std::string(name) +
                    "': slots, slot_bytes and consumers must be positive, with at most " +
                    std::to_string(kMostSlots) + " slots and fewer than " +
                    std::to_string(sync::kMaxParties) + " consumers");
  }
  if (options.slot_bytes > std::numeric_limits<std::size_t>::max() / options.slots) {
    throw Error(errc::invalid_argument, "channel '" + std::string(name) +
                                            "': " + std::to_string(options.slots) + " slots of " +
                                            std::to_string(options.slot_bytes) +
                                            " bytes are more bytes than 64 bits count");
  }
  const std::size_t bytes = std::size_t{options.slots} * options.slot_bytes;
  const std::string data_name = std::string(name) + ".slots";
  Buffer slots;
  try {
    slots = allocate(bytes, {.device = options.device, .name = data_name, .mode = options.mode});
  } catch (const Error& error) {
    if (error.status() != errc::already_exists) throw;
    slots = open(data_name);
  }
  if (slots.size() != bytes || slots.device() != options.device) {
    throw Error(errc::invalid_argument, "channel '" + std::string(name) +
                                            "' exists with other slots (" +
                                            std::to_string(slots.size()) + " bytes on device " +
                                            std::to_string(slots.device()) + ")");
  }
  return Channel(std::make_unique<Channel::state>(connection_, name, role == ChannelRole::producer,
                                                  options, std::move(slots)));
}

const std::string& Channel::name() const noexcept {
  static const std::string empty;
  return state_ ? state_->object.name() : empty;
}

}  // namespace gpumem
