#pragma once
/// @file
/// @brief daemon/memory/: pools and reservations, and the books that hand them out.
///
/// A pool (host memfd or CUDA IPC pool) places and frees allocations; the memory book turns
/// allocation requests into ledger rows plus what each row needs in its backend (which pool and
/// where), and lets the backend go when the ledger says the last holder left. Reservations have
/// their own book (reservation_book.hpp). Backends return domain values; the books turn them
/// into wire replies at their edge.
///
/// Tenants: whoever holds a pool's descriptor can reach every allocation in it (a host pool is
/// one memfd; a CUDA pool's pointer export data can be forged), so each configured pool has one
/// instance per access class: objects of one owner uid with the same mode (and group, when the
/// mode shares anything) share an instance, and a client gets an instance's descriptor only if
/// the policy lets it open what the instance holds (read-only descriptors for readers of host
/// pools). The configured size bounds the sum of a pool's instances.
/// May include: proto/ and shared/ headers, daemon/config/, daemon/ledger/, daemon/policy/,
/// daemon/request_error.hpp. Not: daemon/net/, daemon/sync/, daemon/handlers/.

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "gpumem/proto/messages.hpp"
#include "ledger/ledger.hpp"
#include "memory/open_named.hpp"
#include "memory/pool.hpp"
#include "memory/pool_factory.hpp"
#include "policy/access_class.hpp"
#include "policy/access_policy.hpp"
#include "policy/descriptor_budget.hpp"
#include "policy/quota_policy.hpp"

namespace gpumem::daemon {

class memory_book {
 public:
  /// @param config its pools; open_pools() makes their first instances.
  /// @param descriptors what a new instance's descriptor must fit: it is kept in the fd store.
  memory_book(ledger& rows, const access_policy& access, const quota_policy& quotas,
              descriptor_budget& descriptors, const daemon_config& config, pool_maker make_pool);

  /// @brief Makes each configured pool's instance for the daemon's own uid, so that a pool the
  /// machine cannot make stops the start with its name instead of failing a first allocation;
  /// after re-adoption, lets go of adopted instances that take no allocations and hold nothing.
  /// @throws config_error when a configured pool cannot be made.
  void open_pools();
  /// @brief Adds a configured pool while the daemon runs (a reload) and makes its first
  /// instance, as open_pools() does at start.
  /// @throws config_error when it cannot be made, or there is no room left for another pool;
  /// nothing changes then.
  void add_pool(const pool_config& config);

  /// @name Re-adoption (daemon/restart/), before open_pools().
  /// @{
  /// @brief A pool instance a previous daemon made, with its id and class. A pool no longer
  /// configured keeps serving what it holds, under its old settings.
  void adopt_pool(std::unique_ptr<pool> adopted, const access_class& tenant);
  /// @brief Allocation @p id (its ledger row restored) lives in pool @p pool_id at @p where.
  /// @throws request_error(internal) when the pool is unknown or cannot take it back.
  void adopt_allocation(object_id id, std::uint32_t pool_id, const placement& where,
                        const grant_details& grant);
  /// @brief Ids below @p limit are not given to new instances: a client may still know an
  /// instance of the previous daemon by one of them.
  void reserve_pool_ids(std::uint32_t limit);
  /// @}

  /// @name What the state store writes down (daemon/restart/).
  /// @{
  /// @brief Starts in their pools what the allocations since the last call left to be done in
  /// the background (pool::start_deferred_work()): the loop calls it once their replies went
  /// out.
  void start_deferred_work() noexcept;
  /// @brief Finishes in their pools the frees since the last call (pool::settle_frees()):
  /// before the changes are written down, so that what the records call free is zeroed (a
  /// restarted daemon also zeroes the free space it adopts: zero_free_space()).
  void settle_frees() noexcept;
  /// @brief Re-adoption, once every allocation is adopted: pool::zero_free_space() in each pool.
  void zero_free_space();

  /// @return nullptr for an id no instance has (any more).
  const pool* pool_by_id(std::uint32_t pool_id) const noexcept;
  /// @brief Every pool id is below it.
  std::uint32_t pool_id_limit() const noexcept { return static_cast<std::uint32_t>(pools_.size()); }
  const access_class& tenant_of_pool(std::uint32_t pool_id) const {
    return pool_owner_.at(pool_id).second;
  }
  /// @return the pool and place of allocation @p id, nullopt for no such allocation.
  std::optional<std::pair<const pool*, placement>> placement_of(object_id id) const;
  /// @}

  /// @throws request_error for an unknown device or pool, a taken name, or a full pool.
  proto::allocation_reply allocate(client_id client, const proto::allocate_request& request);
  /// @throws request_error when no allocation has the name or the caller may not open it.
  proto::allocation_reply open(client_id client, const proto::open_request& request);
  /// @throws request_error when the client holds no such allocation.
  void release(client_id client, const proto::release_request& request);
  /// @brief @p client's connection ended: the pools let go of what they kept for its releases
  /// (pool::forget_holder).
  void forget_holder(client_id client) noexcept;

  /// @brief The ledger took the last reference of some client off @p id: frees the memory
  /// once nobody holds it.
  void let_go(object_id id, const object_row& row) noexcept;
  /// @brief Whether memory of @p id is used by GPU work that only the holder's process exit
  /// is sure to end.
  bool needs_process_exit(object_id id, const object_row& row) const noexcept;

  /// @brief Whether @p client and the daemon share CUDA interprocess events. The driver keeps
  /// a process's events in a /dev/shm segment of mode 0600 (measured on an H100, driver 580),
  /// so only processes of one uid can open each other's: the daemon sends other uids no ready
  /// event and answers their grants once the allocation is done, and they release after their
  /// stream's work is done instead of sending an event.
  bool shares_events(client_id client) const;

  /// @brief Configured pools (each may have several instances).
  std::size_t pool_count() const noexcept {
    return static_cast<std::size_t>(std::ranges::count_if(families_, &memory_book::listed));
  }
  /// @brief The instance @p pool_id and the descriptor @p client may have of it.
  /// @throws request_error(not_found) for no such instance, or one the client may not reach
  /// (permission_denied would tell it that the instance exists).
  std::pair<const pool*, int> pool_for(client_id client, std::uint32_t pool_id) const;
  /// @brief The kFeature* bits of the memory: CUDA, MPS.
  std::uint32_t features() const noexcept;

  /// @brief The pools' usage; the caller fills in the client count.
  proto::stats_reply stats() const;
  /// @brief Each configured pool's spare blocks (CUDA pools keep them), its instances summed.
  std::vector<std::pair<const pool_config*, spare_use>> spares() const;
  /// @brief Pages of what @p asker may see (access_policy::may_see).
  proto::allocation_list_reply list_allocations(client_id asker, object_id after) const;

  static constexpr std::size_t kPageSize = 256;
  /// Pools a restarted daemon keeps serving though its configuration dropped them.
  static constexpr std::size_t kUnconfiguredPools = 16;

 private:
  struct placed {
    pool* home;
    placement where;
  };
  /// A configured pool, its instances and their total use (bounded by the configured size).
  struct pool_family {
    explicit pool_family(pool_config settings)
        : config(std::move(settings)), room(std::make_unique<family_room>(config.size)) {}

    pool_config config;
    /// False for a pool that only a previous daemon's state names: it serves what it holds and
    /// takes nothing new, so nothing is made for it (the device it names may be gone).
    bool configured = true;
    std::map<access_class, pool*> instances;
    /// Instances adopted from a previous daemon that serve what they hold and take nothing new.
    std::vector<pool*> retired;
    /// Allocations and spare blocks of all instances; on the heap, where instances find it.
    std::unique_ptr<family_room> room;
  };

  /// A configured pool, or one from before the restart that still has an instance.
  static bool listed(const pool_family& family) noexcept {
    return family.configured || !family.instances.empty() || !family.retired.empty();
  }
  pool_family& choose_family(const proto::allocate_request& request);
  pool_family& family_named(const pool_config& config);
  /// @throws config_error naming the pool when its first instance cannot be made.
  void open_family(pool_family& family);
  /// Closes an adopted instance that holds nothing any more.
  void release_if_retired_and_empty(pool& instance) noexcept;
  /// Adds @p id to @p ids (deferred_work_, unsettled_frees_) unless it is there.
  static void note_once(std::vector<std::uint32_t>& ids, std::uint32_t id) noexcept;
  /// Room in both lists of noted ids for @p pool_ids ids, so that noting one never allocates
  /// (a free must not fail). Called before pools_ grows.
  void room_for_notes(std::size_t pool_ids);
  /// Runs @p work on each instance noted in @p ids that is still open, then empties @p ids.
  void run_noted(std::vector<std::uint32_t>& ids, void (pool::*work)() noexcept) noexcept;
  /// @throws request_error(out_of_memory) when the family has no room for @p size.
  pool& instance(pool_family& family, const access_class& tenant, std::uint64_t size);
  /// @brief Drops @p home's spare blocks when an allocation of @p size does not fit beside
  /// @p family's allocations and spares and none of home's has that size.
  static void make_room(const pool_family& family, pool& home, std::uint64_t size);
  /// @brief What @p client needs to import allocation @p id (for a client that shares no
  /// events with the daemon, once the allocation is done).
  proto::allocation_reply grant(client_id client, object_id id, const object_row& row,
                                proto::access_mode access) const;

  /// Read once, since the daemon never changes it: every grant of CUDA memory compares a
  /// client's uid with it, and geteuid() is a system call.
  const uid_t daemon_uid_;
  ledger& rows_;
  const access_policy& access_;
  const quota_policy& quotas_;
  descriptor_budget& descriptors_;
  pool_maker make_pool_;
  std::vector<pool_family> families_;
  std::vector<std::unique_ptr<pool>> pools_;  ///< every instance, by id; empty once released
  /// Ids of the pools allocated from since the last start_deferred_work(); ids, not pointers,
  /// because an emptied adopted instance may close in between.
  std::vector<std::uint32_t> deferred_work_;
  /// Ids of the pools freed in since the last settle_frees(), for the same reason.
  std::vector<std::uint32_t> unsettled_frees_;
  std::vector<std::pair<std::size_t, access_class>> pool_owner_;  ///< by id: family, class
  std::unordered_map<object_id, placed> allocations_;
  /// By client: the ids of the pools it released into with an event, which may keep that event
  /// for its next release, so that the end of its connection visits those pools only.
  std::unordered_map<client_id, std::vector<std::uint32_t>> release_pools_;
};

}  // namespace gpumem::daemon
