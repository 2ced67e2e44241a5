#include "gpumem/shared/sync/lock.hpp"

#include <pthread.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "connection.hpp"
#include "cuda_sync.hpp"
#include "gpumem/shared/sync/backoff.hpp"
#include "gpumem/sync.hpp"
#include "sync_object.hpp"

namespace gpumem {

using detail::cuda_sync::wait_kind;

Lock::state::~state() = default;

namespace {

/// The inline fast paths of every live Lock of this process. A child forked from it gets
/// copies that would take and release the parent's locks with the parent's owner bits, and
/// they never reach the library's check: so in the child each loses its guess
/// (lock_fast_path::kNoGuess), and lock() and unlock() take the slow path, which refuses.
class live_fast_paths {
 public:
  void add(detail::lock_fast_path& path) {
    const std::lock_guard lock(mutex_);
    paths_.insert(&path);
  }
  void remove(detail::lock_fast_path& path) noexcept {
    const std::lock_guard lock(mutex_);
    paths_.erase(&path);
  }
  void before_fork() { mutex_.lock(); }
  void after_fork_in_parent() { mutex_.unlock(); }
  void after_fork_in_child() {
    for (detail::lock_fast_path* path : paths_) path->guess(detail::lock_fast_path::kNoGuess);
    mutex_.unlock();
  }

 private:
  std::mutex mutex_;  ///< held across fork() (pthread_atfork), so the child's set is whole
  std::unordered_set<detail::lock_fast_path*> paths_;
};

// Made and registered when the library loads, not at the first Lock: a first Lock made while
// another thread forks would wait in pthread_atfork under a static's guard, which the child
// would inherit taken. Never destroyed: a Lock may outlive the statics at exit.
live_fast_paths& live_locks = *new live_fast_paths();
const bool live_locks_watch_forks = [] {
  ::pthread_atfork([] { live_locks.before_fork(); }, [] { live_locks.after_fork_in_parent(); },
                   [] { live_locks.after_fork_in_child(); });
  return true;
}();

}  // namespace

/// A Lock's state: the part its inline fast paths reach (Lock::state) and the library's.
struct detail::lock_state final : Lock::state {
  lock_state(std::shared_ptr<detail::connection> link, std::string_view name, Mode mode)
      : object(std::move(link), name, mode, proto::sync_kind::lock, 0, proto::sync_role::party),
        algorithm(object.cell<sync::lock_cell>(), object.slot()) {
    fast.bind(object.cell<sync::lock_cell>().word, algorithm.owner_bits());
    live_locks.add(fast);
  }
  ~lock_state() override { live_locks.remove(fast); }
  static lock_state* of(const Lock& lock) noexcept {
    return static_cast<lock_state*>(lock.state_.get());
  }

  detail::sync_object object;
  sync::host_lock algorithm;
  /// The host hold: written by the thread that acquired, read by the one that releases,
  /// both ordered by the lock itself. A hold the fast path takes is the one the last slow
  /// acquire wrote with its guess: taken alone, the lock keeps its ticket and epoch. None
  /// before this object's first acquire, so that its unlock() cannot release a hold another
  /// object of the same client took (holds taken alone all look alike).
  std::optional<sync::lock_hold> hold;
  std::atomic<bool> owner_died{false};
  /// Whether this object already checked that the lock is a host lock (it stays one).
  std::atomic<bool> host_checked{false};
  void enter_host() {
    if (host_checked.load(std::memory_order_relaxed)) return;
    object.enter(sync::domain::host);
    host_checked.store(true, std::memory_order_relaxed);
  }
  /// After a host acquire: the hold, whether the owner died, and the fast path's guess,
  /// which only a hold taken alone and clean gives: its release then just clears the owner.
  /// Read only by holders, so relaxed stores suffice.
  void took(const sync::acquire_result& taken) noexcept {
    hold = taken.hold;
    owner_died.store(taken.status == sync::acquire_status::acquired_owner_died,
                     std::memory_order_relaxed);
    fast.guess(sync::host_lock::free_word_after(taken).value_or(lock_fast_path::kNoGuess));
  }
  std::mutex stream_mutex;
  std::deque<std::uint16_t> stream_tickets;  ///< taken by lock(stream), oldest first

  /// The device addresses a stream-ordered hold waits on and writes, found once per device and
  /// kept, under stream_mutex: finding them takes the page's mutex and a map lookup each, and a
  /// lock stays on one device.
  struct stream_words {
    int device = -1;
    std::uint64_t serving = 0;  ///< the signal cell's `serving` on that device
    std::uint64_t queue = 0;    ///< the host cell's queue[0], as that device sees it
  };
  stream_words words;
  const stream_words& stream_words_on(int device) {
    if (words.device != device) {
      auto& cell = object.cell<sync::lock_cell>();
      words = {device, object.signal_word(device, offsetof(sync::signal_cell, serving)),
               object.page().host_word_on_device(&cell.queue[0])};
    }
    return words;
  }
};

namespace {

Error not_recoverable(const std::string& name) {
  return Error(errc::not_recoverable,
               "lock '" + name +
                   "': a holder died and the next released it without mark_consistent(); "
                   "reset it with `gpumemctl reset " +
                   name + "`");
}

}  // namespace

Lock::Lock() noexcept = default;
Lock::Lock(std::unique_ptr<state> made) : state_(std::move(made)) {}
Lock::Lock(Lock&&) noexcept = default;
Lock& Lock::operator=(Lock&&) noexcept = default;
Lock::~Lock() = default;

// The exported copies of the inline lock() and unlock() (gpumem/sync.hpp).
[[gnu::used]] static constexpr void (Lock::*kExportedLock)() = &Lock::lock;
[[gnu::used]] static constexpr void (Lock::*kExportedUnlock)() = &Lock::unlock;

bool Lock::try_lock() {
  auto* const self = detail::lock_state::of(*this);
  detail::check_usable(self, "Lock");
  self->enter_host();
  const auto taken = self->algorithm.try_acquire();
  if (!taken) return false;
  if (taken->status == sync::acquire_status::not_recoverable) {
    throw not_recoverable(name());
  }
  self->took(*taken);
  return true;
}

LockStatus Lock::acquire() {
  auto* const self = detail::lock_state::of(*this);
  detail::check_usable(self, "Lock");
  self->enter_host();
  const auto result = self->algorithm.acquire();
  // Only within sync::signals_end_waits (Python's module), whose check found that a signal
  // handler raised: the caller has that exception to give, and this its only "not acquired".
  if (result.status == sync::acquire_status::interrupted) return LockStatus::timeout;
  if (result.status == sync::acquire_status::not_recoverable) {
    throw not_recoverable(name());
  }
  self->took(result);
  return result.status == sync::acquire_status::acquired_owner_died
             ? LockStatus::acquired_owner_died
             : LockStatus::acquired;
}

LockStatus Lock::try_acquire_for(std::chrono::nanoseconds timeout) {
  auto* const self = detail::lock_state::of(*this);
  detail::check_usable(self, "Lock");
  self->enter_host();
  const auto deadline = sync::host_lock::clock::now() +
                        std::chrono::duration_cast<sync::host_lock::clock::duration>(timeout);
  const auto result = self->algorithm.acquire(deadline);
  switch (result.status) {
    case sync::acquire_status::timeout:
    case sync::acquire_status::interrupted:  // a signal handler raised: sync::signals_end_waits
      return LockStatus::timeout;
    case sync::acquire_status::not_recoverable:
      throw not_recoverable(name());
    case sync::acquire_status::acquired_owner_died:
      self->took(result);
      return LockStatus::acquired_owner_died;
    case sync::acquire_status::acquired:
      break;
  }
  self->took(result);
  return LockStatus::acquired;
}

void Lock::unlock_contended() {
  auto* const self = detail::lock_state::of(*this);
  detail::check_usable(self, "Lock");
  if (!self->hold || self->algorithm.release(*self->hold) != sync::release_status::released) {
    throw Error(errc::not_lock_owner,
                "lock '" + name() + "' is not held by this process (or an operator reset it)");
  }
}

bool Lock::owner_died() const noexcept {
  return state_ != nullptr && detail::lock_state::of(*this)->owner_died.load();
}

void Lock::mark_consistent() {
  auto* const self = detail::lock_state::of(*this);
  detail::check_usable(self, "Lock");
  if (!self->hold || !self->algorithm.mark_consistent(*self->hold)) {
    throw Error(errc::not_lock_owner, "lock '" + name() + "' is not held by this process");
  }
  self->owner_died.store(false, std::memory_order_relaxed);
}

void Lock::lock(Stream stream) {
  auto* const self = detail::lock_state::of(*this);
  detail::check_usable(self, "Lock");
  detail::cuda_sync::stream_ops ops(stream);
  self->object.enter(sync::domain::stream, ops.device());
  // With the queue full, the turn to pass first may be one this object holds: the mutex goes
  // between tries, so that another thread's unlock(stream) of it is not kept waiting.
  for (sync::backoff full;; full.pause()) {
    std::lock_guard guard(self->stream_mutex);
    // Found before the ticket is taken: a failure leaves no turn that nobody passes on.
    const std::uint64_t serving = self->stream_words_on(ops.device()).serving;
    const std::optional<std::uint16_t> ticket = self->algorithm.try_take_stream_ticket();
    if (!ticket) continue;
    self->stream_tickets.push_back(*ticket);
    ops.wait_value(serving, *ticket, wait_kind::equal);
    return;
  }
}

void Lock::unlock(Stream stream) {
  auto* const self = detail::lock_state::of(*this);
  detail::check_usable(self, "Lock");
  detail::cuda_sync::stream_ops ops(stream);
  self->object.enter(sync::domain::stream, ops.device());
  std::lock_guard guard(self->stream_mutex);
  if (self->stream_tickets.empty()) {
    throw Error(errc::not_lock_owner, "lock '" + name() + "': no stream-ordered hold to release");
  }
  const std::uint16_t ticket = self->stream_tickets.front();
  const auto& words = self->stream_words_on(ops.device());
  const std::uint64_t entry =
      words.queue + (ticket % sync::kLockQueueLength) * sizeof(sync::lock_cell::queue[0]);
  const auto steps = sync::stream_release_writes(ticket);
  std::array<detail::cuda_sync::value_write, steps.size()> writes{};
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const bool on_signal_page = steps[i].word == sync::stream_write::word_type::serving;
    writes[i] = {on_signal_page ? words.serving : entry, steps[i].value};
  }
  ops.write_values(writes);  // one submission: the hand-off is the next holder's critical path
  self->stream_tickets.pop_front();
}

device::lock_ref Lock::device(int device) {
  auto* const self = detail::lock_state::of(*this);
  detail::check_usable(self, "Lock");
  self->object.enter(sync::domain::device, device);
  auto address = [&](std::size_t offset) {
    return reinterpret_cast<unsigned int*>(self->object.signal_word(device, offset));
  };
  return {address(offsetof(sync::signal_cell, device_lock)),
          address(offsetof(sync::signal_cell, owner_died)), self->object.slot()};
}

Lock Client::lock(std::string_view name, const SyncOptions& options) {
  return Lock(std::make_unique<detail::lock_state>(connection_, name, options.mode));
}

const std::string& Lock::name() const noexcept {
  static const std::string empty;
  return state_ ? detail::lock_state::of(*this)->object.name() : empty;
}

}  // namespace gpumem
