#pragma once
/// @file
/// @brief A shared range at a fixed address in every holder, that grows in place, changes
/// version without moving, and sleeps to host memory and wakes at the same address.
///
/// @code
///   // the writer
///   auto weights = gpumem::Reservation::create(client, 8ull << 30,
///                                              {.device = 0, .name = "llama", .initial = bytes});
///   load(weights.data(), bytes);           // version 1: the owner writes it in place
///   // each reader
///   auto w = gpumem::Reservation::open(other, "llama", {.access = gpumem::Access::read_only});
///   for (;;) { w.refresh(); forward(w.data()); }   // w.data() never moves
///   // the writer, later: a new version, written beside the one readers use
///   auto next = weights.begin_version(new_bytes);
///   load(next.data(), new_bytes);
///   next.commit();                          // readers switch at their next refresh()
/// @endcode
///
/// The daemon holds the physical chunks (cuMemCreate chunks of 2 MiB on an H100, or 2 MiB memfds
/// on the host backend); every holder maps them at the same offsets of its own reserved range.
/// Mapping changes are host calls that take effect at once: let the GPU work on the range finish
/// before refresh(), quiesce() or release().
///
/// Versions: version 1 is what reserve() made; its owner writes it in place and may resize it.
/// Every later version is written as a draft (fresh chunks, mapped writable at another address
/// in the owner only) and committed whole; a committed version never changes (on the host the
/// daemon seals its memfds) and every holder maps it read-only. Holders see a new version at
/// their next refresh(); the old version's chunks are freed once no holder maps them.
///
/// Sleep: the bytes go to host memory the daemon owns and the chunks are freed; holders let go
/// at their next refresh() or quiesce() and keep their address range reserved; after wake()
/// their next refresh() maps the new chunks at the same addresses.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "gpumem/gpumem.hpp"

namespace gpumem {

struct ReserveOptions {
  int device = 0;           ///< a CUDA device, or gpumem::kHost
  std::string_view name{};  ///< empty: anonymous
  std::size_t initial = 0;  ///< bytes committed at once, rounded up to whole chunks
  Mode mode{};              ///< who else may open it (see gpumem::Mode)
};

struct OpenReservationOptions {
  Access access = Access::read_write;
};

struct SleepOptions {
  /// Drop the bytes instead of copying them: after wake() the range reads zero.
  bool discard = false;
  /// How long holders get to let go; zero: the daemon's default (5 s).
  std::chrono::milliseconds deadline{0};
};

/// What the daemon says of a reservation now.
struct ReservationStatus {
  std::uint64_t id = 0;
  std::uint64_t version = 0;
  std::size_t committed = 0;   ///< bytes of the current version
  std::size_t host_bytes = 0;  ///< host memory holding them while asleep
  ReservationState state = ReservationState::awake;
  bool busy = false;  ///< a sleep or wake is under way
  /// How the last sleep or wake failed (errc::ok when it did not): reason says why.
  errc error = errc::ok;
  std::string reason;
};

class Reservation;

/// @brief The next version of a reservation while its owner writes it: fresh chunks, mapped
/// writable at an address of their own (data()), invisible to holders until commit().
/// Destroying it uncommitted abandons it. Releasing its Reservation first abandons it too:
/// its chunks are unmapped, commit() throws Error(wrong_state) and abandon() does nothing.
class GPUMEM_API ReservationDraft {
 public:
  ReservationDraft(ReservationDraft&&) noexcept;
  ReservationDraft& operator=(ReservationDraft&&) noexcept;
  ~ReservationDraft();  ///< abandon(), swallowing errors

  void* data() const noexcept;
  std::size_t size() const noexcept;
  std::uint64_t version() const noexcept;

  /// @brief Unmaps the draft, makes it the current version, and maps it in the reservation's
  /// own range (read-only from now on). Let the GPU work writing it finish first.
  /// @throws Error(busy) on the host backend when the draft's memory is still mapped writable
  /// elsewhere (the daemon seals it and cannot): nothing changes then. The error of mapping
  /// it here when that fails after the commit: the version is current then, version() still
  /// says the old one, and refresh() tries again.
  void commit();
  /// @brief Unmaps the draft and frees its chunks; the current version is untouched.
  void abandon();

 private:
  friend class Reservation;
  struct impl;
  explicit ReservationDraft(std::unique_ptr<impl> self);
  std::unique_ptr<impl> self_;
};

class GPUMEM_API Reservation {
 public:
  /// @throws Error: not_supported for a CUDA device without CUDA, already_exists,
  /// no_such_device, out_of_memory, quota_exceeded.
  static Reservation create(Client& client, std::size_t max_bytes, const ReserveOptions& = {});
  /// @throws Error(not_found) when no reservation has that name (or the caller may not open it).
  static Reservation open(Client& client, std::string_view name,
                          const OpenReservationOptions& = {});

  Reservation(Reservation&&) noexcept;
  Reservation& operator=(Reservation&&) noexcept;
  ~Reservation();  ///< as release(), swallowing errors

  /// Start of the range in this process (a device pointer, or a host pointer for kHost); fixed
  /// for the object's life, across versions, sleep and wake.
  void* data() const noexcept;
  /// Bytes mapped here now, from data() on (0 while asleep or quiesced).
  std::size_t size() const noexcept;
  std::size_t max_size() const noexcept;
  std::size_t chunk_size() const noexcept;
  std::uint64_t id() const noexcept;
  int device() const noexcept;
  Access access() const noexcept;
  /// The version mapped here (as of the last refresh).
  std::uint64_t version() const noexcept;
  /// The state as of the last refresh.
  ReservationState state() const noexcept;

  /// @brief Owner only, version 1 only: commit or decommit at the end so that @p bytes (rounded
  /// up to whole chunks) are backed, then map the change here.
  /// @throws Error(permission_denied) for a holder that is not the owner, or one opened
  /// read-only (also in the owner's process); Error(wrong_state) once a later version was
  /// committed, or while it sleeps.
  void resize(std::size_t bytes);
  /// @brief Maps what is current: chunks committed since, a newer version, or nothing while the
  /// reservation sleeps (which lets go of the mapping, keeping the range). Asks the daemon only
  /// when its notice page shows a change.
  /// @return size() afterwards.
  /// @throws Error(not_found) once the reservation was lost while asleep.
  std::size_t refresh();
  /// @brief Waits until the current version is at least @p version, then refresh()es.
  /// @return false when @p timeout passed first (nothing changes here then).
  bool wait_version(std::uint64_t version, std::chrono::milliseconds timeout);
  /// @brief Lets go of the mapping (the range stays reserved) and tells the daemon, so that a
  /// sleep need not wait for this holder. The next refresh() maps again.
  void quiesce();

  /// @brief Owner only: starts writing the next version, of @p bytes (at most max_size()).
  /// @throws Error(permission_denied) as resize() does; Error(wrong_state) while another draft
  /// is open or while it sleeps.
  ReservationDraft begin_version(std::size_t bytes);

  /// @brief Owner (or an operator, see sleep_reservation): puts it to sleep and waits until it
  /// sleeps. This holder lets go first; every other holder gets the deadline to let go.
  /// @throws Error(busy) naming each holder that did not let go in time; it stays awake then,
  /// and nothing was freed. Error(timed_out) when it is still under way after the deadline and
  /// the copy's margin, or a signal ended the wait (only within sync::signals_end_waits, as in
  /// Python): the sleep goes on.
  void sleep(const SleepOptions& = {});
  /// @brief Wakes it (new chunks, the bytes copied back), waits, and maps it here again.
  /// @throws Error(out_of_memory) when the device has no room; it stays asleep then.
  /// Error(timed_out) when it is still under way after @p timeout, or a signal ended the wait
  /// (as for sleep()): the wake goes on, and refresh() maps it once it is awake.
  void wake(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ReservationStatus status();

  /// @brief Unmaps everything and lets go; the chunks live on while another holder maps them.
  void release();

 private:
  friend class ReservationDraft;
  // An operator's calls by name reach the daemon through the client's session, as this does.
  friend GPUMEM_API ReservationStatus reservation_status(Client&, std::string_view);
  friend GPUMEM_API void sleep_reservation(Client&, std::string_view, const SleepOptions&);
  friend GPUMEM_API void wake_reservation(Client&, std::string_view, std::chrono::milliseconds);
  static std::shared_ptr<detail::connection> session_of(Client& client);
  struct impl;  // not `state`: state() names the reservation's state
  explicit Reservation(std::unique_ptr<impl> self);
  std::unique_ptr<impl> self_;
};

/// @name An operator's view of a reservation by name (the owner uid or an administrator), as
/// gpumemctl sleep, wake and reservation-status use it. Sleep and wake wait for the outcome and
/// throw as Reservation::sleep and wake do.
/// @{
GPUMEM_API ReservationStatus reservation_status(Client& client, std::string_view name);
GPUMEM_API void sleep_reservation(Client& client, std::string_view name, const SleepOptions& = {});
GPUMEM_API void wake_reservation(Client& client, std::string_view name,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(60));
/// @}

}  // namespace gpumem
