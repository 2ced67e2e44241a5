#pragma once
/// @file
/// @brief The reservations the daemon hands out (daemon/memory/versioned_reservation.hpp): made,
/// opened, resized, written as new versions, put to sleep and woken, on behalf of clients.
/// May include: what memory_book.hpp may.

#include <chrono>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "gpumem/proto/messages.hpp"
#include "ledger/ledger.hpp"
#include "memory/background.hpp"
#include "memory/reservation.hpp"
#include "memory/versioned_reservation.hpp"
#include "policy/access_policy.hpp"
#include "policy/descriptor_budget.hpp"
#include "policy/quota_policy.hpp"

namespace gpumem::daemon {

class reservation_book {
 public:
  /// How long holders get to let go when a sleep names no deadline.
  static constexpr std::chrono::milliseconds kDefaultSleepDeadline{5000};
  static constexpr std::chrono::milliseconds kLongestSleepDeadline{600000};
  static constexpr std::size_t kPageSize = 256;

  /// @param make_device_reservation empty when CUDA is unavailable: host reservations only.
  /// @param descriptors what every chunk made must fit: each is kept in systemd's fd store.
  reservation_book(ledger& rows, const access_policy& access, const quota_policy& quotas,
                   descriptor_budget& descriptors, reservation_maker make_device_reservation);

  /// @brief Where sleep and wake run their copies; without one they are not_supported.
  void set_background(background* worker) noexcept { background_ = worker; }
  /// @brief Host memory that woken reservations may keep, pages made and pinned, for their next
  /// sleep of as many bytes (sleep_memory_kept): such a sleep copies at once instead of making
  /// and pinning its pages first. Lowering it lets kept copies go until the rest fits.
  void keep_sleep_memory(std::uint64_t most_bytes);
  /// Bytes kept that way now, all reservations together.
  std::uint64_t sleep_memory_kept() const noexcept;
  /// @brief Descriptors that sleeps and wakes under way store when their copies end: a sleep's
  /// copy, a wake's chunks (descriptor_budget's to_come).
  std::size_t descriptors_to_come();

  /// @name Requests. The replies of reserve and open go with the notice page's read-only fd.
  /// @{
  /// @throws request_error: not_supported (a CUDA device without CUDA), already_exists,
  /// no_such_device, out_of_memory, quota_exceeded.
  proto::reservation_reply reserve(client_id client, const proto::reserve_request& request);
  proto::reservation_reply open(client_id client, const proto::open_request& request);
  /// @throws request_error(permission_denied) unless the client owns it; wrong_state after a
  /// later version was committed or while it sleeps.
  proto::reservation_reply resize(client_id client, const proto::resize_request& request);
  /// @brief One page of chunks; @p fds gets their descriptors (owned here), one per record.
  proto::chunks_reply chunks(client_id client, const proto::chunks_request& request,
                             std::vector<int>& fds);
  void quiesce(client_id client, object_id id);
  void release(client_id client, object_id id);
  proto::reservation_reply begin_version(client_id client,
                                         const proto::begin_version_request& request);
  proto::reservation_reply commit_version(client_id client, const proto::version_request& request);
  void abandon_version(client_id client, const proto::version_request& request);
  proto::reservation_status sleep(client_id client, const proto::sleep_request& request);
  proto::reservation_status wake(client_id client, const proto::reservation_target& target);
  proto::reservation_status status(client_id client, const proto::reservation_target& target);
  proto::reservation_list_reply list(client_id asker, object_id after) const;
  /// The notice page's fd for holders of @p id.
  int notice_fd(object_id id) const;
  /// @}

  /// @brief A client let go of @p id for good (the ledger already took it off the row).
  void let_go(object_id id, const object_row& row) noexcept;

  /// @name Re-adoption and the state store (daemon/restart/).
  /// @{
  void adopt(object_id id, std::unique_ptr<versioned_reservation> adopted);
  /// @return nullptr for no such reservation.
  const versioned_reservation* find(object_id id) const noexcept;
  /// @}

 private:
  versioned_reservation& held(client_id client, object_id id, bool owner_only, const char* what);
  /// The reservation a target names, with the rights to put it to sleep, wake it or see it.
  std::pair<object_id, versioned_reservation*> targeted(client_id client,
                                                        const proto::reservation_target& target);
  /// @param chunk_size 0 for a new reservation, else its chunks' size (reservation_maker).
  std::unique_ptr<reservation> make(std::int32_t device, std::uint64_t max_size,
                                    std::uint64_t chunk_size = 0) const;
  proto::reservation_reply grant(object_id id, const versioned_reservation& entry,
                                 proto::access_mode access) const;
  /// Starts the copy of a draining sleep once no holder maps anything.
  void copy_out_when_ready(object_id id);
  void deadline_passed(object_id id, std::uint64_t attempt);
  /// After a sleep or wake: a reservation asleep whose owner left is lost.
  void lose_if_owner_left(object_id id, versioned_reservation& entry);
  /// Whether @p entry is still what the book holds under @p id (a copy may outlive it).
  bool still_held(object_id id, const versioned_reservation* entry) const noexcept;
  std::string describe_holder(client_id holder) const;
  /// @brief Charges @p id's owner (the ledger's bytes of it) for what it takes: the current
  /// version, and the earlier versions readers still map and the draft it keeps. Called
  /// wherever those change: commits, drafts, holders mapping, quiescing or going.
  void recharge(object_id id) noexcept;
  /// Hands @p copy to the worker to be let go of: freeing many GiB must not hold the loop up.
  void let_go_off_loop(std::optional<sleep_copy> copy) noexcept;

  ledger& rows_;
  const access_policy& access_;
  const quota_policy& quotas_;
  descriptor_budget& descriptors_;
  /// Reservations with a sleep or wake asked for: descriptors_to_come() drops those done.
  std::set<object_id> under_way_;
  void note_under_way(object_id id);
  reservation_maker make_device_reservation_;
  background* background_ = nullptr;
  std::uint64_t keep_at_most_ = 0;
  /// Shared with a copy under way, which must not lose what it copies when the book lets go.
  std::unordered_map<object_id, std::shared_ptr<versioned_reservation>> entries_;
};

}  // namespace gpumem::daemon
