#pragma once
/// @file
/// @brief Locks, barriers and channels inside kernels: `__device__` functions on the words of
/// a device's signal page, shared by the kernels of every process that opened the object.
///
/// @code
///   __global__ void add(gpumem::device::lock_ref lock, float* total, const float* parts) {
///     gpumem::device::with_lock(lock, [&] { *total += parts[threadIdx.x]; });
///   }
///   add<<<blocks, threads, 0, stream>>>(lock.device(0), total, parts);  // lock: gpumem::Lock
/// @endcode
///
/// Two processes' kernels run at the same time only under MPS (measured on an H100: a 0.86 us
/// hand-off with MPS; without it the GPU time-slices between processes and a hand-off takes
/// milliseconds). Without MPS, prefer the stream-ordered forms between processes. Two kernels of
/// one process that wait on each other hung under lazy module loading and ran with
/// CUDA_MODULE_LOADING=EAGER. Every wait here backs off with __nanosleep, so a spinning warp
/// leaves the SM to others: a lock attempt up to about 1 us, a counter wait up to 256 ns (see
/// detail::backoff).
///
/// Pass the refs by value (they are plain addresses): a lock object with a destructor that
/// releases, copied into a kernel, would release once per copy.

#include <cooperative_groups.h>

#include <cuda/atomic>

#include "gpumem/device_refs.hpp"

namespace gpumem::device {

namespace detail {

using system_word = cuda::atomic_ref<unsigned int, cuda::thread_scope_system>;

/// Doubles the pause from 32 ns up to @p Longest.
template <unsigned int Longest>
struct backoff {
  unsigned int nanoseconds = 32;
  __device__ void pause() {
    __nanosleep(nanoseconds);
    if (nanoseconds < Longest) nanoseconds *= 2;
  }
};

/// A lock attempt is a compare-and-swap that contends with the holder's release and with the
/// other waiters: it backs off up to about 1 us.
using lock_backoff = backoff<1024>;

/// A counter wait only reads, and a hand-off waits out the pause it is in when the count lands.
/// Measured on an H200 (a channel's consumer kernel of 16 blocks releasing 1 MiB items in order
/// to a producer kernel), with a fence before each release store: pauses of up to 1 us or
/// 512 ns ran at 0.73 of the same copies with no channel, up to 256 ns or 64 ns at 0.87-0.88,
/// a spin with no pause at 0.87. With the release store alone (publish()), up to 256 ns or
/// 128 ns and a spin all ran at 0.90-0.91.
using counter_backoff = backoff<256>;

__device__ inline unsigned long long now_ns() {
  unsigned long long time;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(time));
  return time;
}

/// Counters compare cyclically, like the host's and cuStreamWaitValue32's.
__device__ inline bool reached(unsigned int count, unsigned int target) {
  return static_cast<int>(count - target) >= 0;
}

}  // namespace detail

/// @brief One attempt. For one thread; lanes of a warp that share a lock use with_lock().
__device__ inline bool try_lock(lock_ref lock) {
  unsigned int expected = 0;
  return detail::system_word(*lock.word)
      .compare_exchange_strong(expected, lock.slot, cuda::memory_order_acquire,
                               cuda::memory_order_relaxed);
}

/// @brief Spins with back-off until held or @p timeout_ns passed.
__device__ inline bool try_lock_for(lock_ref lock, unsigned long long timeout_ns) {
  const unsigned long long deadline = detail::now_ns() + timeout_ns;
  detail::lock_backoff wait;
  while (!try_lock(lock)) {
    if (detail::now_ns() >= deadline) return false;
    wait.pause();
  }
  return true;
}

/// @brief Spins with back-off until held. For one thread (see with_lock()).
__device__ inline void lock(lock_ref lock) {
  detail::lock_backoff wait;
  while (!try_lock(lock)) wait.pause();
}

__device__ inline void unlock(lock_ref lock) {
  detail::system_word(*lock.word).store(0, cuda::memory_order_release);
}

/// @brief True once the daemon released the lock for a process that died holding it: the
/// holder repairs what it protects, then calls mark_consistent().
__device__ inline bool owner_died(lock_ref lock) {
  return detail::system_word(*lock.owner_died).load(cuda::memory_order_acquire) != 0;
}

__device__ inline void mark_consistent(lock_ref lock) {
  detail::system_word(*lock.owner_died).store(0, cuda::memory_order_relaxed);
}

/// @brief Runs @p critical in every calling thread, one at a time, holding the lock.
///
/// Lanes of a warp that call it for the same lock form a group whose first lane takes the lock
/// once for all of them; the others never spin. So the group cannot deadlock on itself (a lane
/// spinning on a lock its own warp holds), and a warp costs one acquisition, not 32. The
/// group's lanes then take turns, with the warp synchronised between turns.
template <class Critical>
__device__ void with_lock(lock_ref lock, Critical&& critical) {
  namespace cg = cooperative_groups;
  const cg::coalesced_group active = cg::coalesced_threads();
  const cg::coalesced_group sharing =
      cg::labeled_partition(active, reinterpret_cast<unsigned long long>(lock.word));
  if (sharing.thread_rank() == 0) gpumem::device::lock(lock);
  sharing.sync();
  cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
  for (unsigned int turn = 0; turn < sharing.size(); ++turn) {
    if (sharing.thread_rank() == turn) critical();
    sharing.sync();
  }
  // The group's synchronisation orders every lane's writes before lane 0's release store,
  // which orders them ahead of itself (see publish()).
  if (sharing.thread_rank() == 0) gpumem::device::unlock(lock);
}

/// @brief Publishes @p count as this party's progress (a barrier round arrived at, an item
/// published or released). One thread per party calls it, after the work it covers.
/// The block's other threads get their work in by a __syncthreads() before it.
__device__ inline void publish(counters_ref counters, unsigned int count) {
  // A system-scope release store orders ahead of itself everything before it in causality
  // order, the block's work synchronised by a __syncthreads() included; it compiles to one
  // MEMBAR.SYS and the store. A fence before it made a second MEMBAR.SYS: with it, a channel
  // in kernels on an H200 ran at 0.87 of the copies alone; without it, at 0.91.
  detail::system_word(counters.counts[counters.party]).store(count, cuda::memory_order_release);
}

/// @brief Waits until @p party reached @p target. False when the object broke first (a party
/// died or left) and @p party had not reached it.
__device__ inline bool wait_for(counters_ref counters, unsigned int party, unsigned int target) {
  const auto broken = [&] {
    return detail::system_word(*counters.broken).load(cuda::memory_order_acquire) != 0;
  };
  const auto count_now = [&] {
    return detail::system_word(counters.counts[party]).load(cuda::memory_order_acquire);
  };
  // A live count is never half of kBrokenLead past a target (a channel's producer leads by its
  // slots at most, a barrier's parties by a round). Farther is the daemon's jump for a party that
  // died or left, and the party's real count is the one before it. The daemon writes the broken
  // word before the jump (each of its stream writes is fenced), so with the count loaded first,
  // a jumped count always comes with the broken word set.
  const auto really_reached = [&](unsigned int count) {
    if (!detail::reached(count, target)) return false;
    return count - target < kBrokenLead / 2 || !broken() ||
           detail::reached(count - kBrokenLead, target);
  };
  detail::counter_backoff wait;
  for (;;) {
    const unsigned int count = count_now();
    if (detail::reached(count, target)) return really_reached(count);
    // Broken since the count was read: the party may have reached the target just before it
    // left, and the daemon breaks the object only after that, so the count read again holds it.
    if (broken()) return really_reached(count_now());
    wait.pause();
  }
}

/// @brief Barrier: arrive at @p round (1, 2, ...) and wait for every party. One thread per
/// party; the rest of its block waits on __syncthreads() around it.
__device__ inline bool arrive_and_wait(counters_ref barrier, unsigned int round) {
  publish(barrier, round);
  for (unsigned int party = 0; party < barrier.parties; ++party) {
    if (!wait_for(barrier, party, round)) return false;
  }
  return true;
}

/// @brief Channel producer: waits until slot `sequence % slots` is free again (every consumer
/// released the item that used it before).
__device__ inline bool wait_free_slot(counters_ref channel, unsigned int sequence,
                                      unsigned int slots) {
  for (unsigned int consumer = 1; consumer < channel.parties; ++consumer) {
    if (!wait_for(channel, consumer, sequence + 1 - slots)) return false;
  }
  return true;
}

/// @brief Channel consumer: waits until item @p sequence is published.
__device__ inline bool wait_item(counters_ref channel, unsigned int sequence) {
  return wait_for(channel, 0, sequence + 1);
}

/// @brief Channel consumer whose blocks take items in turn (block b items b, b + blocks, ...):
/// releases item @p sequence once the items before it are released, by this block or others,
/// so that the count still means every item before it. One thread per block calls it, after a
/// __syncthreads() that follows the block's reads of the slot.
///
/// It waits for this kernel's own blocks only, and never gives up, also on a broken channel:
/// item @p sequence was published, so every item before it was too, and the blocks that took
/// them release them. So every block must be resident at once, and must release every item it
/// took. (Blocks beyond the channel's slots are correct, and wait for items to be published.)
__device__ inline void release_in_order(counters_ref channel, unsigned int sequence) {
  // A fence before the wait and an atomic exchange after it (a read-modify-write continues the
  // release sequence of the count before it) would keep a MEMBAR.SYS out of the chain of
  // releases: in one process on an H200 (16 blocks, 1 MiB items) that ran at 0.92-0.93 of the
  // copies alone against 0.90-0.91, but between two processes under MPS both read 0.89-0.90.
  // So the release is the plain one, whose ordering publish() states.
  detail::counter_backoff wait;
  while (!detail::reached(
      detail::system_word(channel.counts[channel.party]).load(cuda::memory_order_acquire),
      sequence)) {
    wait.pause();
  }
  publish(channel, sequence + 1);
}

}  // namespace gpumem::device
