#pragma once
/// @file
/// @brief A CUDA pool that a previous daemon made, as a restarted daemon holds it: the pool's
/// shareable fd and the export data of its live allocations, kept in systemd's fd store and the
/// state snapshot. The driver lets only the process that made a pool allocate from it or
/// export it again (measured, ../shared/CUDA-FACTS.md), so this pool never allocates: it hands
/// out the kept fd and export data, and the daemon closes its fd once nobody holds any of its
/// allocations, which gives the memory back after every importer has let go too. It needs no
/// CUDA call of its own.

#include <map>

#include "gpumem/shared/unique_fd.hpp"
#include "memory/pool.hpp"

namespace gpumem::daemon {

class adopted_device_pool final : public pool {
 public:
  adopted_device_pool(std::uint32_t id, pool_config config, unique_fd exported)
      : pool(id, std::move(config)), exported_(std::move(exported)) {}

  int shareable_fd() const noexcept override { return exported_.get(); }
  grant_details grant_of(const placement& where) const override;
  bool is_device_memory() const noexcept override { return true; }
  bool takes_allocations() const noexcept override { return false; }

 private:
  std::optional<placement> do_allocate(std::uint64_t) override { return std::nullopt; }
  /// Nothing to free one by one: the blocks go with the pool, when the daemon closes its fd.
  void do_free(const placement& where, std::uint64_t) noexcept override {
    exports_.erase(where.offset);
  }
  bool do_adopt(const placement& where, std::uint64_t size, const grant_details& grant) override;
  std::uint64_t largest_possible() const noexcept override { return 0; }

  unique_fd exported_;
  std::map<std::uint64_t, grant_details> exports_;  ///< by device address
};

}  // namespace gpumem::daemon
