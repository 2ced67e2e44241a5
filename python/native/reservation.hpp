#pragma once
/// @file
/// @brief gpumem.Reservation and gpumem.ReservationDraft over gpumem::Reservation and
/// gpumem::ReservationDraft, with DLPack, the buffer protocol (host) and
/// __cuda_array_interface__ (CUDA) for their mapped ranges.
///
/// A reservation is held by its Python object, by its open draft and by every export (a tensor,
/// an array, a memoryview): the last of them lets go of it. Calls reach the C++ object one at a
/// time, each waiting for its turn without the GIL; what Python reads of it (size, version,
/// state) is what the last call left, so that reading never waits for a call of another thread.
/// An export describes the range as it was mapped when it was made: its address holds across
/// versions, sleep and wake, but its bytes are not mapped while the reservation sleeps or is
/// quiesced, nor beyond size() after a refresh that shrank it.

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "exported_range.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"

namespace gpumem::python {

/// @brief The C++ reservation that Python objects share.
class reservation_core {
 public:
  explicit reservation_core(Reservation reservation);

  /// @brief Runs @p work on the reservation when no other call does; the caller has let go of
  /// the GIL. The snapshot is taken again afterwards, whether @p work threw or not.
  /// @throws Error(busy) when this thread has the turn already: a signal's handler that runs
  /// while its own sleep or wake waits (signal_waits.hpp) and calls the same reservation.
  template <class Work>
  decltype(auto) run(Work&& work) {
    const turn taken(*this);
    const snapshot_after_call snapshot{*this};
    return work(reservation_);
  }

  /// @brief The last call: unmaps and lets go, reporting failure. Nothing of the C++ object can
  /// be read afterwards, so no snapshot is taken.
  void release();

  void* data() const noexcept { return data_; }
  std::size_t max_size() const noexcept { return max_size_; }
  std::size_t chunk_size() const noexcept { return chunk_size_; }
  std::uint64_t id() const noexcept { return id_; }
  int device() const noexcept { return device_; }
  Access access() const noexcept { return access_; }
  /// As of the last call.
  std::size_t size() const noexcept { return size_.load(); }
  std::uint64_t version() const noexcept { return version_.load(); }
  ReservationState state() const noexcept { return state_.load(); }
  /// A read-only holder, or a committed version after the first: mapped without write access.
  bool read_only() const noexcept;

 private:
  /// The reservation's turn, taken for a call; which thread has it, so that the same thread
  /// asking again is refused instead of waiting for itself.
  class turn {
   public:
    explicit turn(reservation_core& core);
    ~turn();
    turn(const turn&) = delete;
    turn& operator=(const turn&) = delete;

   private:
    reservation_core& core_;
  };
  struct snapshot_after_call {
    reservation_core& core;
    ~snapshot_after_call() { core.take_snapshot(); }
  };
  void take_snapshot() noexcept;

  Reservation reservation_;
  std::mutex mutex_;
  std::atomic<std::thread::id> turn_holder_{};
  void* const data_;
  const std::size_t max_size_;
  const std::size_t chunk_size_;
  const std::uint64_t id_;
  const int device_;
  const Access access_;
  std::atomic<std::size_t> size_{0};
  std::atomic<std::uint64_t> version_{0};
  std::atomic<ReservationState> state_{ReservationState::awake};
};

/// @brief An open draft and the reservation it must not outlive.
struct draft_core {
  draft_core(std::shared_ptr<reservation_core> reservation, ReservationDraft draft);
  /// Abandons the draft unless it was committed, in the reservation's turn.
  ~draft_core();
  draft_core(const draft_core&) = delete;
  draft_core& operator=(const draft_core&) = delete;

  const std::shared_ptr<reservation_core> reservation;  // declared first: destroyed last
  std::optional<ReservationDraft> draft;                // empty once committed or abandoned
};

/// @brief gpumem.ReservationDraft. Its exports hold it: while one lives it cannot be committed
/// (commit unmaps the draft), and abandon() leaves it to the last of them.
class shared_draft {
 public:
  explicit shared_draft(std::shared_ptr<draft_core> core);
  shared_draft(shared_draft&&) noexcept = default;
  shared_draft(const shared_draft&) = delete;
  shared_draft& operator=(const shared_draft&) = delete;

  /// @throws BufferError while an export holds the draft, or once it is committed or abandoned.
  void commit();
  /// @brief Lets go of the draft: at once, or when its last export goes. No-op once committed.
  void abandon();
  /// @throws BufferError once committed or abandoned.
  exported_range exported() const;
  std::uintptr_t pointer() const;

  std::size_t size() const noexcept { return size_; }
  std::uint64_t version() const noexcept { return version_; }
  int device() const noexcept { return device_; }
  bool committed() const noexcept { return outcome_ == outcome::committed; }
  bool abandoned() const noexcept { return outcome_ == outcome::abandoned; }

 private:
  enum class outcome { open, committed, abandoned };
  const std::shared_ptr<draft_core>& core() const;

  std::shared_ptr<draft_core> core_;
  outcome outcome_ = outcome::open;
  void* data_;
  std::size_t size_;
  std::uint64_t version_;
  int device_;
};

/// @brief gpumem.Reservation.
class shared_reservation {
 public:
  explicit shared_reservation(Reservation reservation);
  shared_reservation(shared_reservation&&) noexcept = default;
  shared_reservation(const shared_reservation&) = delete;
  shared_reservation& operator=(const shared_reservation&) = delete;

  /// @throws BufferError once released.
  const std::shared_ptr<reservation_core>& core() const;
  /// @brief Lets go of this object's reference: when neither an export nor a draft holds the
  /// reservation, it is released at once, reporting failure; else the last of them releases it.
  void release();
  bool released() const noexcept { return core_ == nullptr; }
  /// @brief Keeps the reservation until this object is deallocated, release() notwithstanding:
  /// for consumers that hold this object rather than the memory (__cuda_array_interface__).
  void hold_until_deallocated();
  /// @brief The range mapped now (from data() on, size() bytes), held by the export.
  exported_range exported() const;
  shared_draft begin_version(std::size_t bytes);

  std::uint64_t id() const noexcept { return id_; }
  int device() const noexcept { return device_; }

 private:
  std::shared_ptr<reservation_core> core_;
  std::shared_ptr<reservation_core> held_until_deallocated_;
  std::uint64_t id_;
  int device_;
};

/// @brief Adds Client.reserve, open_reservation and the operator's calls by name
/// (reservation_status, sleep_reservation, wake_reservation) to @p client_type.
void bind_reservation_calls(pybind11::class_<Client>& client_type);
/// @brief Adds Reservation, ReservationDraft, ReservationState and ReservationStatus.
void bind_reservation(pybind11::module_& module);

}  // namespace gpumem::python
