#pragma once
/// @file
/// @brief Cross-process locks, barriers and channels: named objects made through gpumemd,
/// whose state lives on pages every user maps, so that their fast paths never talk to it.
///
/// @code
///   auto client = gpumem::Client::connect();
///   gpumem::Lock lock = client.lock("model.weights");
///   {
///     std::scoped_lock hold(lock);
///     if (lock.owner_died()) { repair(); lock.mark_consistent(); }
///     update();
///   }
///   gpumem::Barrier stage = client.barrier("stage", 4);
///   if (stage.arrive_and_wait() == gpumem::BarrierStatus::broken) { ... a party died ... }
/// @endcode
///
/// Each object is used in one domain, fixed by its first use: on the host (futexes on the host
/// page), in stream order (stream memory operations on the device's signal page), or inside
/// kernels (gpumem/device.cuh). A use in another domain throws Error(wrong_domain).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "gpumem/device_refs.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/lock_fast_path.hpp"

namespace gpumem {

enum class LockStatus { acquired, acquired_owner_died, timeout };
enum class BarrierStatus { ok, broken, timeout };

namespace detail {
class sync_object;
struct lock_state;
}  // namespace detail

/// @brief A named lock shared by processes. Lockable (std::scoped_lock works) and movable;
/// one Lock object may be used by several threads, like a std::mutex.
///
/// Host holders queue in FIFO order. When a holder's process dies, the next one gets the lock
/// with acquired_owner_died (owner_died() turns true): it repairs the data and calls
/// mark_consistent(); unlocking without that makes the lock not recoverable, and every later
/// acquire throws Error(not_recoverable) until `gpumemctl reset NAME`.
class GPUMEM_API Lock {
 public:
  Lock() noexcept;
  Lock(Lock&&) noexcept;
  Lock& operator=(Lock&&) noexcept;
  ~Lock();

  /// Inline: uncontended, one compare-and-swap and nothing else (gpumem/lock_fast_path.hpp);
  /// otherwise acquire().
  void lock();
  bool try_lock();
  template <class Rep, class Period>
  bool try_lock_for(std::chrono::duration<Rep, Period> timeout) {
    return try_acquire_for(timeout) != LockStatus::timeout;
  }
  /// @brief Inline like lock(): uncontended, one compare-and-swap.
  ///
  /// The holder is the process (its Client), as the daemon sees it, not one Lock object or
  /// thread: another Lock object of the same name and Client that took the lock before can
  /// release a hold it did not take, a caller's bug as unlocking another's std::mutex is.
  /// @throws Error(not_lock_owner) when this process does not hold it (never took it, or an
  /// operator reset it meanwhile), or this object never took it.
  void unlock();

  /// @throws Error(not_recoverable)
  /// @return never timeout, except within the scope that Python's module sets so that a signal
  /// whose handler raised ends the wait (sync::signals_end_waits); lock() is not used there.
  LockStatus acquire();
  LockStatus try_acquire_for(std::chrono::nanoseconds timeout);
  /// True from an acquire that found the previous holder dead until mark_consistent().
  bool owner_died() const noexcept;
  void mark_consistent();

  /// @brief Stream-ordered: the stream waits until it holds the lock; the host does not, except
  /// while the lock's queue is full (512 turns taken and not yet passed): then it waits for the
  /// oldest to pass, letting another thread's unlock(stream) of this object through meanwhile.
  /// The ticket is taken now, so holders are served in the order these calls were made.
  void lock(Stream stream);
  /// @brief Stream-ordered: passes the lock on after the work queued on @p stream so far.
  /// Unlocks the oldest stream-ordered hold this object took.
  void unlock(Stream stream);

  /// @brief The lock as kernels of device @p device use it (gpumem/device.cuh).
  device::lock_ref device(int device = 0);

  const std::string& name() const noexcept;
  explicit operator bool() const noexcept { return state_ != nullptr; }

 private:
  friend class Client;
  friend struct detail::lock_state;
  struct state;
  explicit Lock(std::unique_ptr<state> made);
  void unlock_contended();
  std::unique_ptr<state> state_;
};

/// What the inline lock() and unlock() reach of a Lock's state; the library's part derives
/// from it (detail::lock_state).
struct Lock::state {
  virtual ~state();
  detail::lock_fast_path fast;
};

// Exported as well as inline: programs built against 0.1.0 call them (abi/libgpumem.abi), so
// the library keeps a copy of each (client/src/lock.cpp).
GPUMEM_API inline void Lock::lock() {
  if (state_ == nullptr || !state_->fast.try_lock()) acquire();
}
GPUMEM_API inline void Lock::unlock() {
  if (state_ == nullptr || !state_->fast.try_unlock()) unlock_contended();
}

/// @brief A named barrier of a fixed number of parties, each a Barrier object (of any
/// process). Rounds are split: arrive() returns a token, wait(token) waits for that round.
///
/// When a party's process dies the barrier is broken: every wait returns broken (streams
/// stop waiting), until an operator resets it (`gpumemctl reset NAME`) or it is made anew
/// once every party let go.
class GPUMEM_API Barrier {
 public:
  using clock = std::chrono::steady_clock;
  struct Token {
    std::uint32_t round = 0;
    std::uint32_t epoch = 0;
  };

  Barrier() noexcept;
  Barrier(Barrier&&) noexcept;
  Barrier& operator=(Barrier&&) noexcept;
  ~Barrier();

  Token arrive();
  BarrierStatus wait(Token token);
  BarrierStatus wait_for(Token token, std::chrono::nanoseconds timeout);
  BarrierStatus arrive_and_wait();

  /// @brief Stream-ordered arrival: counted once the work queued on @p stream so far is done.
  Token arrive(Stream stream);
  /// @brief Stream-ordered wait: @p stream waits until every party arrived for the round.
  void wait(Token token, Stream stream);

  /// @brief The barrier as kernels of device @p device use it (gpumem/device.cuh).
  device::counters_ref device(int device = 0);

  bool broken() const noexcept;
  std::uint32_t parties() const noexcept;  ///< as now: an operator's reset may change them
  std::uint32_t party() const noexcept;    ///< this object's number among the parties
  const std::string& name() const noexcept;
  explicit operator bool() const noexcept { return state_ != nullptr; }

 private:
  friend class Client;
  struct state;
  explicit Barrier(std::unique_ptr<state> made);
  std::unique_ptr<state> state_;
};

struct ChannelOptions {
  std::uint32_t slots = 4;      ///< items in flight at most
  std::size_t slot_bytes = 0;   ///< bytes per item
  std::uint32_t consumers = 1;  ///< each consumer sees every item
  int device = kHost;           ///< where the slots live
  Mode mode{};                  ///< of the channel and its slots, when this call creates them
};

/// @brief A ring of slots over a shared buffer, from one producer to consumers that each see
/// every item, in order. Built from per-party counters: the producer waits until every
/// consumer released the slot it reuses; a consumer waits until the item is published.
///
/// Producer: `auto slot = ch.acquire_slot(); fill(slot.data); ch.publish();`
/// Consumer: `auto item = ch.acquire(); use(item.data); ch.release();`
class GPUMEM_API Channel {
 public:
  struct Slot {
    void* data = nullptr;        ///< in the channel's buffer (host or device memory)
    std::uint64_t sequence = 0;  ///< the item's number, from 0
    BarrierStatus status = BarrierStatus::ok;
  };

  Channel() noexcept;
  Channel(Channel&&) noexcept;
  Channel& operator=(Channel&&) noexcept;
  ~Channel();

  /// Producer: waits for a free slot. Consumer: waits for the next item.
  Slot acquire_slot();
  void publish();
  Slot acquire();
  void release();

  /// @brief Stream-ordered forms: the waits and signals happen on @p stream; the host only
  /// computes the slot's address.
  ///
  /// @p count items at once (1 to slots()) take one stream memory operation for all of them,
  /// which is what an item costs a consumer beside its own work (sync_bench: 1 MiB items copied
  /// out one at a time run at 0.6 of the bare copies). The slot returned is the first; item k
  /// of the batch is at slot_data(slot.sequence + k). release() and publish() may hand on
  /// fewer than are held, oldest first; the next acquire waits until all were handed on.
  /// @throws Error(invalid_argument) for a count of 0, above slots(), or above what is held.
  Slot acquire_slot(Stream stream);
  void publish(Stream stream);
  Slot acquire(Stream stream);
  void release(Stream stream);
  Slot acquire_slot(Stream stream, std::uint32_t count);
  void publish(Stream stream, std::uint32_t count);
  Slot acquire(Stream stream, std::uint32_t count);
  void release(Stream stream, std::uint32_t count);
  /// @brief Where item @p sequence lives: its slot in buffer().
  void* slot_data(std::uint64_t sequence) const;

  /// @brief The counters as kernels use them: party 0 publishes, party c >= 1 consumes.
  device::counters_ref device(int device = 0);

  bool producer() const noexcept;
  bool broken() const noexcept;
  std::uint32_t slots() const noexcept;
  std::size_t slot_bytes() const noexcept;
  Buffer& buffer() noexcept;
  const std::string& name() const noexcept;
  explicit operator bool() const noexcept { return state_ != nullptr; }

 private:
  friend class Client;
  struct state;
  explicit Channel(std::unique_ptr<state> made);
  std::unique_ptr<state> state_;
};

}  // namespace gpumem
