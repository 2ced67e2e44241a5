#pragma once
/// @file
/// @brief What systemd's fd store has room for. systemd keeps at most FileDescriptorStoreMax
/// descriptors of a service and drops the rest without telling it; an object whose descriptor
/// was dropped is lost at the next restart. Reservations take one descriptor per chunk, by the
/// hundred, so what would take them past the store's size (less what every connection and the
/// daemon's own files need) is refused at the request, while the client can still be told.

#include <cstddef>
#include <functional>
#include <string_view>

namespace gpumem::daemon {

class descriptor_budget {
 public:
  /// Kept for pool instances, lock and signal pages and the state's own files.
  static constexpr std::size_t kKeptForTheDaemon = 256;

  /// @param store_max fd_store_max, the unit's FileDescriptorStoreMax.
  /// @param max_connections each connection's process is kept as a pidfd.
  void configure(std::size_t store_max, std::size_t max_connections) noexcept {
    store_max_ = store_max;
    max_connections_ = max_connections;
  }
  /// @param kept_now the descriptors kept in the store now; empty when nothing is kept (no
  /// systemd), which checks nothing.
  /// @param connections_now the connections counted in kept_now already.
  void count_with(std::function<std::size_t()> kept_now,
                  std::function<std::size_t()> connections_now) {
    kept_now_ = std::move(kept_now);
    connections_now_ = std::move(connections_now);
  }
  /// @throws request_error(quota_exceeded) naming fd_store_max when @p more descriptors for
  /// @p what would leave too little room.
  void check(std::size_t more, std::string_view what) const;

 private:
  std::size_t store_max_ = 0;
  std::size_t max_connections_ = 0;
  std::function<std::size_t()> kept_now_;
  std::function<std::size_t()> connections_now_;
};

}  // namespace gpumem::daemon
