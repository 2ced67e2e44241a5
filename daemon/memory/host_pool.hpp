#pragma once
/// @file
/// @brief Pool of shared host memory: one sealed memfd the size of the pool; allocations are
/// page-aligned ranges of it that clients mmap from the pool's fd.
///
/// A freed range's pages are punched out of the memfd before the range is placed again, so the
/// next allocation reads zeroes and the pages go back to the system. The punches wait for
/// settle_frees(), once per turn of the loop, and neighbouring ranges freed in that turn take
/// one fallocate: a punch cost the loop more than the rest of a 4 KiB free (perf, 64
/// connections of allocate|free: 12% of its cycles, mostly the call's fixed cost). A range whose
/// punch fails (no kernel error is expected here) is never placed again by this daemon; the
/// next one punches all free space of the memfds it adopts (zero_free_space()).

#include <vector>

#include "gpumem/shared/range_allocator.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "memory/pool.hpp"
#include "rate_limited_log.hpp"

namespace gpumem::daemon {

class host_pool final : public pool {
 public:
  /// @throws std::system_error when the memfd cannot be made.
  host_pool(std::uint32_t id, pool_config config);
  /// @brief Re-adoption: the memfd a previous daemon made, with its bytes; its size wins over
  /// the configured one. @throws std::system_error
  host_pool(std::uint32_t id, pool_config config, unique_fd memfd);

  int shareable_fd() const noexcept override { return memfd_.get(); }
  int read_only_fd() const noexcept override { return read_only_.get(); }
  grant_details grant_of(const placement& where) const override { return {where.offset, {}}; }
  void settle_frees() noexcept override;
  void zero_free_space() override;

 private:
  std::optional<placement> do_allocate(std::uint64_t size) override;
  void do_free(const placement& where, std::uint64_t size) noexcept override;
  bool do_adopt(const placement& where, std::uint64_t size, const grant_details&) override;
  std::uint64_t largest_possible() const noexcept override { return ranges_.largest_free_block(); }
  /// Punches [@p offset, @p offset + @p length). @return false, having logged why, when the
  /// memfd refused: the range still holds its last holder's bytes and must not be placed again.
  bool punch(std::uint64_t offset, std::uint64_t length) noexcept;

  /// Makes room in unsettled_ for the free of one more placed range, so that do_free(), which
  /// must not fail, never allocates. @throws std::bad_alloc, before anything is placed.
  void keep_room_to_free();

  struct freed_range {
    std::uint64_t offset;
    std::uint64_t size;  ///< as allocated, for range_allocator::free
  };

  unique_fd memfd_;
  unique_fd read_only_;  ///< the memfd opened again O_RDONLY: mmap refuses PROT_WRITE on it
  range_allocator ranges_;
  std::vector<freed_range> unsettled_;                   ///< freed, not yet punched nor placeable
  std::size_t placed_ = 0;                               ///< ranges allocated or adopted, not freed
  rate_limited_log refusals_{std::chrono::seconds(10)};  ///< of punches
};

}  // namespace gpumem::daemon
