#pragma once
/// @file
/// @brief What systemd's fd store has room for. systemd keeps at most FileDescriptorStoreMax
/// descriptors of a service and drops the rest without telling it: an object whose descriptor
/// was dropped is lost at the next restart, and a state file dropped loses everything. So every
/// request that makes a descriptor to keep (a reservation's chunks and notice page, a sleep's
/// copy, a pool instance or lock page for a new access class, a device's signal page) is refused
/// where it would take the store past its size, less a pidfd for each connection still allowed
/// and room for the daemon's own files, while its client can still be told.

#include <cstddef>
#include <functional>
#include <string_view>

namespace gpumem::daemon {

class descriptor_budget {
 public:
  /// @param store_max fd_store_max, the unit's FileDescriptorStoreMax.
  /// @param max_connections each connection's process is kept as a pidfd.
  void configure(std::size_t store_max, std::size_t max_connections) noexcept {
    store_max_ = store_max;
    max_connections_ = max_connections;
  }
  /// @brief Where the counts come from; nothing is checked until then (nothing is kept without
  /// systemd).
  struct sources {
    std::function<std::size_t()> kept_now;         ///< in the store as of its last write
    std::function<std::size_t()> connections_now;  ///< open, their pidfds in kept_now
    /// Made but stored only when background work ends: sleeps' copies, wakes' chunks.
    std::function<std::size_t()> to_come;
  };
  void count_with(sources counts) { counts_ = std::move(counts); }
  /// @brief Counts @p more descriptors for @p what as kept until the next write: several
  /// requests are answered before one write stores what they made.
  /// @throws request_error(quota_exceeded) naming fd_store_max when they would leave too little
  /// room.
  void check(std::size_t more, std::string_view what);
  /// @brief As check(), for descriptors that to_come counts from now on (a sleep's copy, a
  /// wake's chunks): not counted twice.
  void check_coming(std::size_t more, std::string_view what) const;
  /// @brief The state was written, or nothing was made: what the requests since made is
  /// counted in kept_now.
  void written() noexcept { promised_ = 0; }
  std::size_t store_max() const noexcept { return store_max_; }

 private:
  std::size_t store_max_ = 0;
  std::size_t max_connections_ = 0;
  std::size_t promised_ = 0;
  sources counts_;
};

}  // namespace gpumem::daemon
