#pragma once
// Kernels for the lock, barrier and channel tests and benchmarks (plain C++ interface).

#include <cstddef>
#include <cstdint>

#include "gpumem/device_refs.hpp"
#include "kernels.hpp"

namespace gpumem::testing {

/// One thread: read, pause, write back plus one. Two overlapping holders lose an increment.
void increment_slowly(std::uint64_t* counter, stream_t stream);
/// Every thread of @p blocks x @p threads adds one @p iterations times under with_lock().
void count_under_device_lock(device::lock_ref lock, std::uint64_t* counter, unsigned blocks,
                             unsigned threads, unsigned iterations, stream_t stream);
/// One thread takes the lock, sets *taken, and spins until the process dies.
void hold_device_lock_forever(device::lock_ref lock, unsigned* taken, stream_t stream);
/// One thread: try_lock_for(timeout); *result = 1 + owner_died when taken (then released), 0 not.
void probe_device_lock(device::lock_ref lock, unsigned long long timeout_ns, unsigned* result,
                       stream_t stream);

/// slots[party] = round.
void write_round(std::uint32_t* slots, unsigned party, unsigned round, stream_t stream);
/// Adds to *errors the parties whose slot is behind @p round.
void check_round(const std::uint32_t* slots, unsigned parties, unsigned round,
                 unsigned long long* errors, stream_t stream);

/// Two processes' kernels take turns @p rounds times (process @p me on turns of its parity):
/// through the device lock (take it, pass the turn if it is ours, release), or through the
/// turn word alone (the raw spin ping-pong). *done = turns taken; both give up after 10 s.
void device_lock_ping_pong(device::lock_ref lock, unsigned* turn, unsigned me, unsigned rounds,
                           unsigned* done, stream_t stream);
void spin_ping_pong(unsigned* turn, unsigned me, unsigned rounds, unsigned* done, stream_t stream);

// The in-kernel forms (gpumem/device.cuh). Each kernel reports in @p outcome: [0] the items
// or rounds it passed, [1] 1 when it stopped because the object broke (a party died or left).

/// A channel's party in a kernel, for each of @p items: the producer (one block) waits for the
/// item's slot, fills it with the pattern seeded by the item's number (support/pattern.hpp) and
/// publishes it; a consumer's @p blocks take the items in turn, each waits for its item, adds
/// to *errors the bytes that differ from its pattern and releases it in order
/// (device::release_in_order).
void pass_items_in_kernel(device::counters_ref channel, bool producing, void* slots,
                          unsigned slot_count, std::size_t slot_bytes, unsigned items,
                          unsigned long long* errors, unsigned* outcome, stream_t stream,
                          unsigned blocks = 1);
/// A barrier party in one thread: each round writes the round to slots[party], arrives and
/// waits, then adds to *errors the parties whose slot is behind.
void barrier_rounds_in_kernel(device::counters_ref barrier, std::uint32_t* slots, unsigned rounds,
                              unsigned long long* errors, unsigned* outcome, stream_t stream);

/// A channel's producer that only hands slots on, in one thread: from @p first items published
/// (where the last call left the count), publishes every slot as soon as the consumers
/// released it, until @p until items are published (the slots hold bytes already).
void hand_on_in_kernel(device::counters_ref channel, unsigned slot_count, unsigned first,
                       unsigned until, stream_t stream);
/// Copies items @p first .. @p first + @p count - 1 of @p item_bytes (a multiple of 16) out of
/// a ring of @p slot_count slots into @p to (@p blocks items' room), each block one item at a
/// time. With @p channel (not null): each block waits for its item and releases it once the
/// items before it are released, so releases stay in order. Without: the same copies alone.
/// Every block must be resident at once (a block waits for the one before it): @p blocks at
/// most the channel's slots and what the device runs together.
void copy_items_in_kernel(const device::counters_ref* channel, const void* slots,
                          unsigned slot_count, std::size_t item_bytes, unsigned first,
                          unsigned count, void* to, unsigned blocks, stream_t stream);

/// What wait_for_in_blocks() writes for each block.
inline constexpr unsigned kWaitReached = 1;
inline constexpr unsigned kWaitGaveUp = 2;
/// @p blocks blocks of one thread each add one to *started, then wait (device::wait_for) for
/// @p party of @p counters to reach @p target, and write kWaitReached or kWaitGaveUp (the object
/// broke first) to answers[block]. Every word may be in pinned host memory, which the host
/// writes while the blocks wait.
void wait_for_in_blocks(device::counters_ref counters, unsigned party, unsigned target,
                        unsigned* started, unsigned* answers, unsigned blocks, stream_t stream);

void zero_on_device(void* data, std::size_t size, stream_t stream);
/// Copies @p size bytes device to host and waits.
void copy_to_host(void* host, const void* device, std::size_t size, stream_t stream);
/// True when the stream's work is done.
bool stream_idle(stream_t stream);
/// Device-to-device copy on the stream (channel bandwidth baseline).
void copy_on_device(void* to, const void* from, std::size_t size, stream_t stream);

}  // namespace gpumem::testing
