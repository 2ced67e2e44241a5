#pragma once
/// @file
/// @brief A pool of shareable memory on one device. The base class keeps the books every
/// backend shares (usage, high-water mark, error text); a backend only places and frees.

#include <cstdint>
#include <optional>

#include "config/config.hpp"
#include "gpumem/proto/messages.hpp"
#include "gpumem/proto/wire.hpp"

namespace gpumem::daemon {

/// Where an allocation lives inside its pool, as the backend decided.
struct placement {
  std::uint64_t offset = 0;
  std::uint64_t reserved_bytes = 0;  ///< backing memory taken, rounding included
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

  /// @brief The handle clients import the pool by; owned by the pool.
  virtual int shareable_fd() const noexcept = 0;
  virtual proto::handle_type handle_kind() const noexcept = 0;
  /// @brief Fills what an importer needs besides the fd (CUDA: the ready event's handle).
  virtual void describe_pool(proto::pool_reply&) const {}
  /// @brief Fills what an importer needs to reach one allocation.
  virtual void describe_grant(const placement& where, proto::allocation_reply& grant) const = 0;
  /// @brief A holder let go of one reference after the work the release event marks; the pool
  /// frees nothing before that work is done. Host pools have nothing to wait for.
  virtual void holder_released(const placement&, const proto::release_request&) {}
  /// @brief Whether memory of this pool is used by GPU work that only the holder's process
  /// exit is sure to end.
  virtual bool is_device_memory() const noexcept { return false; }
  virtual driver_usage driver_counters() const { return {}; }
  /// @brief Interprocess events this pool holds open now.
  virtual std::uint32_t ipc_events_live() const noexcept { return 0; }

 protected:
  virtual std::optional<placement> do_allocate(std::uint64_t size) = 0;
  virtual void do_free(const placement& where, std::uint64_t size) noexcept = 0;
  /// @brief The largest request that would succeed now, for the error text.
  virtual std::uint64_t largest_possible() const noexcept = 0;

 private:
  std::uint32_t id_;
  pool_config config_;
  pool_usage usage_;
};

}  // namespace gpumem::daemon
