#pragma once
/// @file
/// @brief What systemd's fd store has room for. systemd keeps at most FileDescriptorStoreMax
/// descriptors of a service and drops the rest without telling it; an object whose descriptor
/// was dropped is lost at the next restart. Reservations take one descriptor per chunk, by the
/// hundred, so what would take them past the store's size (less what every connection and the
/// daemon's own files need) is refused at the request, while the client can still be told.

#include <algorithm>
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
  /// @param kept_now the descriptors kept in the store as of its last write; empty when nothing
  /// is kept (no systemd), which checks nothing.
  /// @param connections_now the connections open now, whose pidfds kept_now counts.
  void count_with(std::function<std::size_t()> kept_now,
                  std::function<std::size_t()> connections_now) {
    kept_now_ = std::move(kept_now);
    connections_now_ = std::move(connections_now);
  }
  /// @brief Counts @p more descriptors for @p what as kept until the next write: several
  /// requests are answered before one write stores what they made.
  /// @throws request_error(quota_exceeded) naming fd_store_max when they would leave too little
  /// room.
  void check(std::size_t more, std::string_view what);
  /// @brief The state was written: what the requests since made is counted in kept_now.
  void written() noexcept { promised_ = 0; }
  /// @brief After check(): @p more are stored only when background work ends (a wake's chunks,
  /// once their bytes are copied in), so they stay counted across writes until
  /// stop_deferring(@p more).
  void defer(std::size_t more) noexcept {
    promised_ -= std::min(promised_, more);
    deferred_ += more;
  }
  /// @brief The work ended: its descriptors are stored with the next write, or were let go.
  void stop_deferring(std::size_t more) noexcept {
    deferred_ -= std::min(deferred_, more);
    promised_ += more;
  }

 private:
  std::size_t store_max_ = 0;
  std::size_t max_connections_ = 0;
  std::size_t promised_ = 0;
  std::size_t deferred_ = 0;
  std::function<std::size_t()> kept_now_;
  std::function<std::size_t()> connections_now_;
};

}  // namespace gpumem::daemon
