#pragma once
/// @file
/// @brief daemon/memory/: pools and reservations, and the book that hands them out.
///
/// A pool (host memfd or CUDA IPC pool) places and frees allocations; a reservation holds the
/// physical chunks of a VMM range; the memory book turns requests into ledger rows plus what
/// each row needs in its backend (which pool and where, which reservation), and lets the
/// backend go when the ledger says the last holder left. Backends return domain values; the
/// book turns them into wire replies at its edge.
/// May include: proto/ and shared/ headers, daemon/config/, daemon/ledger/,
/// daemon/request_error.hpp. Not: daemon/net/, daemon/sync/, daemon/handlers/.

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "gpumem/proto/messages.hpp"
#include "ledger/ledger.hpp"
#include "memory/pool.hpp"
#include "memory/reservation.hpp"

namespace gpumem::daemon {

class memory_book {
 public:
  /// @param make_reservation empty when reservations are not available (no CUDA).
  memory_book(ledger& rows, const daemon_config& config, std::vector<std::unique_ptr<pool>> pools,
              reservation_maker make_reservation = {});

  /// @throws request_error for an unknown device or pool, a taken name, or a full pool.
  proto::allocation_reply allocate(client_id client, const proto::allocate_request& request);
  /// @throws request_error when no allocation has the name or the caller may not open it.
  proto::allocation_reply open(client_id client, const proto::open_request& request);
  /// @throws request_error when the client holds no such allocation.
  void release(client_id client, const proto::release_request& request);

  /// @throws request_error: not_supported without CUDA, already_exists, no_such_device,
  /// out_of_memory.
  proto::reservation_reply reserve(client_id client, const proto::reserve_request& request);
  proto::reservation_reply open_reservation(client_id client, const proto::open_request& request);
  /// @throws request_error(permission_denied) unless the client owns the reservation.
  proto::reservation_reply resize_reservation(client_id client,
                                              const proto::resize_request& request);
  /// @brief One page of a held reservation's chunks; @p fds gets their descriptors (owned by
  /// the reservation), one per record.
  proto::chunks_reply chunks(client_id client, const proto::chunks_request& request,
                             std::vector<int>& fds);
  void release_reservation(client_id client, object_id reservation_id);

  /// @brief The ledger took the last reference of some client off @p id: frees the memory
  /// once nobody holds it.
  void let_go(object_id id, const object_row& row) noexcept;
  /// @brief Whether memory of @p id is used by GPU work that only the holder's process exit
  /// is sure to end.
  bool needs_process_exit(object_id id, const object_row& row) const noexcept;

  std::size_t pool_count() const noexcept { return pools_.size(); }
  /// @throws request_error(not_found)
  const pool& find_pool(std::uint32_t pool_id) const;
  /// @brief kFeature* bits for hello and stats.
  std::uint32_t features() const noexcept;

  /// @brief The pools' usage; the caller fills in the client count.
  proto::stats_reply stats() const;
  proto::allocation_list_reply list_allocations(object_id after) const;
  proto::reservation_list_reply list_reservations(object_id after) const;

  static constexpr std::size_t kPageSize = 256;

 private:
  struct placed {
    pool* home;
    placement where;
  };

  pool& choose_pool(const proto::allocate_request& request);
  /// The id of the object named @p name in @p family, held once more by @p client.
  /// @throws request_error not_found, permission_denied.
  object_id open_named(client_id client, object_family family, std::string_view name);
  proto::allocation_reply grant(object_id id, const object_row& row,
                                proto::access_mode access) const;
  proto::reservation_reply grant(object_id id, const reservation& backing,
                                 proto::access_mode access) const;

  ledger& rows_;
  bool open_across_users_;
  std::vector<std::unique_ptr<pool>> pools_;
  reservation_maker make_reservation_;
  std::unordered_map<object_id, placed> allocations_;
  std::unordered_map<object_id, std::unique_ptr<reservation>> reservations_;
};

}  // namespace gpumem::daemon
