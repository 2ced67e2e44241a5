#pragma once
/// @file
/// @brief The daemon's books: pools, clients, allocations and names, and the ledger of what
/// each client holds. Pure bookkeeping, no I/O: sessions call it, tests drive it directly.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "gpumem/proto/messages.hpp"
#include "memory/pool.hpp"
#include "memory/reservation.hpp"
#include "sync/sync_registry.hpp"

namespace gpumem::daemon {

struct credentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class registry {
 public:
  using clock = std::chrono::steady_clock;

  /// @param make_reservation empty when reservations are not available (no CUDA).
  registry(const daemon_config& config, std::vector<std::unique_ptr<pool>> pools,
           reservation_maker make_reservation = {}, signal_page_maker make_signal_page = {});

  std::uint64_t add_client(const credentials& who);
  void set_label(std::uint64_t client, std::string label);
  /// @brief Lets go of everything in the client's ledger; what others still hold survives.
  void remove_client(std::uint64_t client) noexcept;

  /// @throws request_error for an unknown device or pool, a taken name, or a full pool.
  proto::allocation_reply allocate(std::uint64_t client, const proto::allocate_request& request);
  /// @throws request_error when no allocation has the name or the caller may not open it.
  proto::allocation_reply open(std::uint64_t client, const proto::open_request& request);
  /// @throws request_error when the client holds no such allocation.
  void release(std::uint64_t client, const proto::release_request& request);
  /// @throws request_error: not_supported without CUDA, already_exists, no_such_device,
  /// out_of_memory.
  proto::reservation_reply reserve(std::uint64_t client, const proto::reserve_request& request);
  proto::reservation_reply open_reservation(std::uint64_t client,
                                            const proto::open_request& request);
  /// @throws request_error(permission_denied) unless the client owns the reservation.
  proto::reservation_reply resize_reservation(std::uint64_t client,
                                              const proto::resize_request& request);
  /// @brief One page of a held reservation's chunks; @p fds gets their descriptors (owned by
  /// the reservation), one per record.
  proto::chunks_reply chunks(std::uint64_t client, const proto::chunks_request& request,
                             std::vector<int>& fds) const;
  void release_reservation(std::uint64_t client, std::uint64_t reservation_id);

  /// @brief Whether the client holds what must outlive its connection while its process
  /// lives: memory its GPU work may still use, a lock, a barrier party.
  bool holds_process_state(std::uint64_t client) const;
  pid_t pid_of(std::uint64_t client) const;

  sync_registry& sync() noexcept { return sync_; }
  /// @brief kFeature* bits for hello and stats.
  std::uint32_t features() const noexcept;

  std::size_t pool_count() const noexcept { return pools_.size(); }
  /// @throws request_error(not_found)
  const pool& find_pool(std::uint32_t pool_id) const;

  proto::stats_reply stats() const;
  proto::client_list_reply list_clients(std::uint64_t after_id) const;
  proto::allocation_list_reply list_allocations(std::uint64_t after_id) const;
  proto::reservation_list_reply list_reservations(std::uint64_t after_id) const;

  static constexpr std::size_t kPageSize = 256;

 private:
  struct allocation {
    pool* home;
    placement where;
    std::uint64_t size;
    std::uint64_t owner;  ///< client id; 0 once the owner let go
    uid_t owner_uid;
    std::string name;
    std::uint32_t holder_count = 1;
  };
  struct client_entry {
    credentials who;
    std::string label;
    clock::time_point connected;
    std::unordered_map<std::uint64_t, std::uint32_t> held;          ///< alloc id -> references
    std::unordered_map<std::uint64_t, std::uint32_t> reservations;  ///< id -> references
  };
  struct reservation_entry {
    std::unique_ptr<reservation> backing;
    std::uint64_t owner;  ///< client id; 0 once the owner let go
    uid_t owner_uid;
    std::string name;
    std::uint32_t holder_count = 1;
  };

  pool& choose_pool(const proto::allocate_request& request);
  client_entry& client(std::uint64_t id);
  static proto::allocation_reply reply_for(std::uint64_t id, const allocation& entry,
                                           proto::access_mode access);
  /// @brief Called once @p client_id holds no reference to @p alloc_id any more.
  void drop_holder(std::uint64_t client_id, std::uint64_t alloc_id) noexcept;
  void drop_reservation_holder(std::uint64_t client_id, std::uint64_t reservation_id) noexcept;
  void check_may_open(const client_entry& opener, uid_t owner_uid, std::string_view name) const;
  static proto::reservation_reply reply_for(std::uint64_t id, const reservation_entry& entry,
                                            proto::access_mode access);
  const reservation_entry& held_reservation(std::uint64_t client,
                                            std::uint64_t reservation_id) const;

  bool open_across_users_;
  clock::time_point started_ = clock::now();
  std::vector<std::unique_ptr<pool>> pools_;
  std::map<std::uint64_t, client_entry> clients_;
  std::map<std::uint64_t, allocation> allocations_;
  std::unordered_map<std::string, std::uint64_t> names_;
  reservation_maker make_reservation_;
  std::map<std::uint64_t, reservation_entry> reservations_;
  std::unordered_map<std::string, std::uint64_t> reservation_names_;
  std::uint64_t next_reservation_id_ = 1;
  std::uint64_t next_client_id_ = 1;
  std::uint64_t next_alloc_id_ = 1;
  sync_registry sync_;
};

}  // namespace gpumem::daemon
