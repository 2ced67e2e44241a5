#pragma once
/// @file
/// @brief A pool of shareable memory on one device. The base class keeps the books every
/// backend shares (usage, high-water mark, error text); a backend only places and frees.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "config/config.hpp"

namespace gpumem::daemon {

/// Where an allocation lives inside its pool, as the backend decided.
struct placement {
  std::uint64_t offset = 0;
  std::uint64_t reserved_bytes = 0;  ///< backing memory taken, rounding included
};

/// An opaque CUDA IPC handle (an event's, or a pointer's export data), 64 bytes as the driver
/// gives it.
using ipc_handle = std::array<std::byte, 64>;

/// What an importer needs to reach one allocation, besides its pool.
struct grant_details {
  std::uint64_t offset = 0;     ///< host pools: where it lies in the pool's memfd
  ipc_handle pointer_export{};  ///< CUDA pools: the pointer's export data
};

struct pool_usage {
  std::uint64_t bytes_in_use = 0;
  std::uint64_t bytes_reserved = 0;
  std::uint64_t bytes_in_use_high = 0;
  std::uint64_t allocations = 0;
};

/// What the driver reports for a CUDA pool (zero for host pools).
struct driver_usage {
  std::uint64_t reserved_current = 0;
  std::uint64_t reserved_high = 0;
  std::uint64_t used_current = 0;
  std::uint64_t used_high = 0;
};

/// Blocks a CUDA pool keeps ahead of demand (cuda_spares), where they came from, and how
/// allocations used them.
struct spare_use {
  std::uint64_t bytes = 0;        ///< held or being made
  std::uint64_t ready_bytes = 0;  ///< of which made, ready to serve an allocation
  std::uint64_t served = 0;       ///< allocations given a spare block
  std::uint64_t missed = 0;       ///< allocations that found none and were made on the request path
  std::uint64_t made = 0;         ///< blocks the spares' worker made
  std::uint64_t reused = 0;       ///< released blocks taken back once their holders were done
};

class pool {
 public:
  pool(std::uint32_t id, pool_config config) : id_(id), config_(std::move(config)) {}
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;
  virtual ~pool() = default;

  std::uint32_t id() const noexcept { return id_; }
  const pool_config& config() const noexcept { return config_; }
  const pool_usage& usage() const noexcept { return usage_; }

  /// @throws request_error(out_of_memory) saying how much is free when @p size does not fit.
  placement allocate(std::uint64_t size);
  void free(const placement& where, std::uint64_t size) noexcept;
  /// @brief Re-adoption: counts an allocation that a previous daemon made here as live.
  /// @throws request_error(internal) when the backend cannot take it back (overlap, range).
  void adopt(const placement& where, std::uint64_t size, const grant_details& grant);
  /// @brief False for a pool adopted from a previous daemon that can only serve what it holds
  /// (the CUDA driver lets no process but the pool's maker allocate from it).
  virtual bool takes_allocations() const noexcept { return true; }

  /// @brief The handle clients import the pool by (a memfd, or a CUDA pool's POSIX fd); owned
  /// by the pool.
  virtual int shareable_fd() const noexcept = 0;
  /// @brief The handle for clients that may only read: host pools give a descriptor that
  /// cannot be mapped writable; the CUDA driver has no such handle, so CUDA pools give theirs.
  virtual int read_only_fd() const noexcept { return shareable_fd(); }
  /// @brief CUDA pools: the interprocess event that importers wait on after each grant.
  virtual std::optional<ipc_handle> ready_event() const { return std::nullopt; }
  /// @brief Returns once every allocation made so far is done: for a grant to a client that
  /// cannot wait on the ready event.
  virtual void finish_allocations() const {}
  virtual grant_details grant_of(const placement& where) const = 0;
  /// @brief Client @p holder (the ledger's id) let go of one reference after the work
  /// @p released_event marks (when given); the pool frees nothing before that work is done.
  /// Host pools have nothing to wait for.
  virtual void holder_released(std::uint64_t /*holder*/, const placement&,
                               const std::optional<ipc_handle>&) {}
  /// @brief Client @p holder's connection ended: what the pool kept for its releases goes.
  virtual void forget_holder(std::uint64_t /*holder*/) noexcept {}
  /// @brief Whether memory of this pool is used by GPU work that only the holder's process
  /// exit is sure to end.
  virtual bool is_device_memory() const noexcept { return false; }
  virtual driver_usage driver_counters() const { return {}; }
  /// @brief Interprocess events this pool holds open now.
  virtual std::uint32_t ipc_events_live() const noexcept { return 0; }
  /// @brief Starts what allocations left to be done in the background (a CUDA pool's next
  /// spare block); called once their replies went out, so that it never delays them.
  virtual void start_deferred_work() noexcept {}
  /// @brief Finishes the frees made since the last call (a host pool punches the freed pages);
  /// called once per turn of the loop, before its changes are written to the restart state.
  virtual void settle_frees() noexcept {}
  /// @brief Re-adoption, once every live allocation is adopted: makes what is free read zeroes
  /// (a host pool punches it), whatever a previous daemon left there.
  virtual void zero_free_space() {}
  /// @brief Spare blocks, for the metrics; none for host pools.
  virtual spare_use spares() const { return {}; }
  /// @brief Whether a spare block of exactly @p size is ready: an allocation it serves needs no
  /// more room.
  virtual bool has_spare(std::uint64_t) const { return false; }
  /// @brief Frees the spare blocks, to make room in the configured pool's size.
  virtual void drop_spares() noexcept {}

 protected:
  /// @brief Counts @p bytes that the backend keeps out of use for good (a host pool's range
  /// whose old bytes could not be cleared) as backing memory held, so that they show.
  void count_withheld(std::uint64_t bytes) noexcept { usage_.bytes_reserved += bytes; }

  virtual std::optional<placement> do_allocate(std::uint64_t size) = 0;
  virtual void do_free(const placement& where, std::uint64_t size) noexcept = 0;
  /// @return false when the allocation cannot be taken back.
  virtual bool do_adopt(const placement& where, std::uint64_t size, const grant_details& grant) = 0;
  /// @brief The largest request that would succeed now, for the error text.
  virtual std::uint64_t largest_possible() const noexcept = 0;

 private:
  std::uint32_t id_;
  pool_config config_;
  pool_usage usage_;
};

}  // namespace gpumem::daemon
