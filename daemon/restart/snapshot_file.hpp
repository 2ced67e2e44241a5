#pragma once
/// @file
/// @brief The state snapshot memfd (daemon/restart/journal.hpp for its layout): written whole
/// from the books on the loop, or folded from the previous snapshot and its journal, which
/// needs nothing of the books and so runs on a thread of its own while the loop goes on in the
/// next generation's journal (state_store.hpp).

#include <cstdint>
#include <span>

#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::daemon::restart {

struct snapshot_file {
  unique_fd fd;  ///< a memfd sealed against any change
  std::uint64_t size = 0;
};

/// @brief A new snapshot of @p generation holding @p batch (one batch_builder batch).
/// @throws std::system_error naming the call that failed.
snapshot_file seal_snapshot(std::uint64_t generation, std::span<const std::byte> batch);

/// @brief The snapshot of @p generation + 1: the records of the snapshot @p snapshot_fd of
/// @p generation with its @p journal replayed over them, each once, in key order.
/// @throws format_error where either cannot be read, std::system_error where the new one cannot
/// be written.
snapshot_file fold_snapshot(int snapshot_fd, std::uint64_t generation,
                            std::span<const std::byte> journal);

/// @brief The bytes of the state file @p fd (a journal's whole room), mapped read-only.
/// @throws format_error where it cannot be mapped.
os::mapping map_state_file(int fd);

/// @brief The bytes of @p mapped, as a replay reads them.
inline std::span<const std::byte> mapped_bytes(const os::mapping& mapped) noexcept {
  return {static_cast<const std::byte*>(mapped.get()), mapped.size()};
}

}  // namespace gpumem::daemon::restart
