#include "gpumem/shared/sync/lock.hpp"

#include <array>
#include <atomic>
#include <cstddef>

#include "connection.hpp"
#include "cuda_sync.hpp"
#include "gpumem/sync.hpp"
#include "sync_object.hpp"

namespace gpumem {

using detail::cuda_sync::wait_kind;

struct Lock::state {
  state(std::shared_ptr<detail::connection> link, std::string_view name, Mode mode)
      : object(std::move(link), name, mode, proto::sync_kind::lock, 0, proto::sync_role::party),
        algorithm(object.cell<sync::lock_cell>(), object.slot()) {}

  detail::sync_object object;
  sync::host_lock algorithm;
  /// The host hold: written by the thread that acquired, read by the one that releases,
  /// both ordered by the lock itself.
  sync::lock_hold hold{};
  std::atomic<bool> owner_died{false};
  /// Whether this object already checked that the lock is a host lock (it stays one).
  std::atomic<bool> host_checked{false};
  void enter_host() {
    if (host_checked.load(std::memory_order_relaxed)) return;
    object.enter(sync::domain::host);
    host_checked.store(true, std::memory_order_relaxed);
  }
  /// Read only by holders, so a relaxed store that is skipped when nothing changes suffices.
  void set_owner_died(bool died) noexcept {
    if (owner_died.load(std::memory_order_relaxed) != died) {
      owner_died.store(died, std::memory_order_relaxed);
    }
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

void Lock::lock() {
  // The uncontended case first, with nothing around its one compare-and-swap: sync_bench
  // compares it with a bare CAS lock, and the checks acquire() makes first cost as much again.
  state* const held = state_.get();
  if (held != nullptr && held->host_checked.load(std::memory_order_relaxed) &&
      held->algorithm.try_acquire_clean(held->hold)) {
    held->set_owner_died(false);
    return;
  }
  acquire();
}

bool Lock::try_lock() {
  detail::check_open(state_.get(), "Lock");
  state_->enter_host();
  const auto taken = state_->algorithm.try_acquire();
  if (!taken) return false;
  if (taken->status == sync::acquire_status::not_recoverable) {
    throw not_recoverable(name());
  }
  state_->hold = taken->hold;
  state_->set_owner_died(taken->status == sync::acquire_status::acquired_owner_died);
  return true;
}

LockStatus Lock::acquire() {
  detail::check_open(state_.get(), "Lock");
  state_->enter_host();
  if (state_->algorithm.try_acquire_clean(state_->hold)) {
    state_->set_owner_died(false);
    return LockStatus::acquired;
  }
  const auto result = state_->algorithm.acquire();
  if (result.status == sync::acquire_status::not_recoverable) {
    throw not_recoverable(name());
  }
  state_->hold = result.hold;
  const bool died = result.status == sync::acquire_status::acquired_owner_died;
  state_->set_owner_died(died);
  return died ? LockStatus::acquired_owner_died : LockStatus::acquired;
}

LockStatus Lock::try_acquire_for(std::chrono::nanoseconds timeout) {
  detail::check_open(state_.get(), "Lock");
  state_->enter_host();
  const auto deadline = sync::host_lock::clock::now() +
                        std::chrono::duration_cast<sync::host_lock::clock::duration>(timeout);
  const auto result = state_->algorithm.acquire(deadline);
  switch (result.status) {
    case sync::acquire_status::timeout:
      return LockStatus::timeout;
    case sync::acquire_status::not_recoverable:
      throw not_recoverable(name());
    case sync::acquire_status::acquired_owner_died:
      state_->hold = result.hold;
      state_->set_owner_died(true);
      return LockStatus::acquired_owner_died;
    case sync::acquire_status::acquired:
      break;
  }
  state_->hold = result.hold;
  state_->set_owner_died(false);
  return LockStatus::acquired;
}

void Lock::unlock() {
  state* const held = state_.get();
  if (held != nullptr && held->algorithm.release_alone(held->hold)) return;
  // Out of line, so that the common case above saves no registers and makes no stack frame for
  // what only this path calls (a lambda, which keeps the access of a member).
  const auto release_queued = [this]() __attribute__((noinline)) {
    detail::check_open(state_.get(), "Lock");
    if (state_->algorithm.release(state_->hold) != sync::release_status::released) {
      throw Error(errc::not_lock_owner,
                  "lock '" + name() + "' is not held by this process (or an operator reset it)");
    }
  };
  release_queued();
}

bool Lock::owner_died() const noexcept {
  return state_ != nullptr && state_->owner_died.load();
}

void Lock::mark_consistent() {
  detail::check_open(state_.get(), "Lock");
  if (!state_->algorithm.mark_consistent(state_->hold)) {
    throw Error(errc::not_lock_owner, "lock '" + name() + "' is not held by this process");
  }
  state_->set_owner_died(false);
}

void Lock::lock(Stream stream) {
  detail::check_open(state_.get(), "Lock");
  detail::cuda_sync::stream_ops ops(stream);
  state_->object.enter(sync::domain::stream, ops.device());
  std::lock_guard guard(state_->stream_mutex);
  // Found before the ticket is taken: a failure leaves no turn that nobody passes on.
  const std::uint64_t serving = state_->stream_words_on(ops.device()).serving;
  const std::uint16_t ticket = state_->algorithm.take_stream_ticket();
  state_->stream_tickets.push_back(ticket);
  ops.wait_value(serving, ticket, wait_kind::equal);
}

void Lock::unlock(Stream stream) {
  detail::check_open(state_.get(), "Lock");
  detail::cuda_sync::stream_ops ops(stream);
  state_->object.enter(sync::domain::stream, ops.device());
  std::lock_guard guard(state_->stream_mutex);
  if (state_->stream_tickets.empty()) {
    throw Error(errc::not_lock_owner, "lock '" + name() + "': no stream-ordered hold to release");
  }
  const std::uint16_t ticket = state_->stream_tickets.front();
  const auto& words = state_->stream_words_on(ops.device());
  const std::uint64_t entry =
      words.queue + (ticket % sync::kLockQueueLength) * sizeof(sync::lock_cell::queue[0]);
  const auto steps = sync::stream_release_writes(ticket);
  std::array<detail::cuda_sync::value_write, steps.size()> writes{};
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const bool on_signal_page = steps[i].word == sync::stream_write::word_type::serving;
    writes[i] = {on_signal_page ? words.serving : entry, steps[i].value};
  }
  ops.write_values(writes);  // one submission: the hand-off is the next holder's critical path
  state_->stream_tickets.pop_front();
}

device::lock_ref Lock::device(int device) {
  detail::check_open(state_.get(), "Lock");
  state_->object.enter(sync::domain::device, device);
  auto address = [&](std::size_t offset) {
    return reinterpret_cast<unsigned int*>(state_->object.signal_word(device, offset));
  };
  return {address(offsetof(sync::signal_cell, device_lock)),
          address(offsetof(sync::signal_cell, owner_died)), state_->object.slot()};
}

Lock Client::lock(std::string_view name, const SyncOptions& options) {
  return Lock(std::make_unique<Lock::state>(connection_, name, options.mode));
}

const std::string& Lock::name() const noexcept {
  static const std::string empty;
  return state_ ? state_->object.name() : empty;
}

}  // namespace gpumem
