#pragma once
/// @file
/// @brief The chunks in one of a reservation's ranges: what the daemon says belongs there
/// (get_chunks, page by page, every page of one version) and what is mapped here, changed from
/// the first index whose chunk differs, since chunks keep their ids while they live.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "gpumem/proto/messages.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "range_mapper.hpp"

namespace gpumem::detail {

class connection;

/// One answer to get_chunks, all of its pages.
struct chunk_listing {
  proto::chunks_head head{};  ///< the first page's: version, state, generation
  std::vector<std::uint64_t> ids;
  std::vector<unique_fd> fds;  ///< one per id
};

/// @brief The chunks of reservation @p reservation_id that @p which names. A version that
/// changes between two pages makes it start over, so that every chunk is of one version.
/// @throws Error from the daemon; Error(bad_message) or Error(unexpected_handle) when the
/// pages contradict themselves.
chunk_listing list_chunks(connection& session, std::uint64_t reservation_id,
                          proto::chunk_set which);

class chunk_mapping {
 public:
  /// @brief Maps into @p range, which has room for @p capacity chunks.
  chunk_mapping(std::unique_ptr<range_mapper> range, std::size_t capacity);

  void* base() const noexcept { return range_->base(); }
  /// Chunks mapped, from index 0 on.
  std::size_t count() const noexcept { return ids_.size(); }

  /// @brief Maps what @p listing lists with @p access: chunks already mapped with the same id
  /// and access stay, the rest are unmapped, then the new ones are mapped.
  /// @throws Error(bad_message) when the listing does not fit the range; what the range_mapper
  /// throws (what was mapped before the failure stays mapped and counted).
  void apply(const chunk_listing& listing, Access access);
  /// @brief Unmaps every chunk; the range stays reserved.
  void clear();

 private:
  void unmap_from(std::size_t index);

  std::unique_ptr<range_mapper> range_;
  std::size_t capacity_;
  std::vector<std::uint64_t> ids_;  ///< of the chunks mapped, by index
  Access access_ = Access::read_only;
};

}  // namespace gpumem::detail
