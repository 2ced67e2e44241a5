#pragma once
/// @file
/// @brief The daemon's state: one ledger of every object and client, and the domain books that
/// keep beside each row what its kind needs (memory: pools and reservations; sync: cells,
/// slots, parties, signal pages). A client's death walks its ledger once, and each object it
/// held goes to its own book. Pure bookkeeping, no I/O: sessions and handlers call it, tests
/// drive it directly.

#include <chrono>
#include <memory>
#include <vector>

#include "config/config.hpp"
#include "ledger/ledger.hpp"
#include "memory/memory_book.hpp"
#include "sync/sync_book.hpp"

namespace gpumem::daemon {

class books {
 public:
  /// @param make_reservation, make_signal_page empty when CUDA is unavailable.
  books(const daemon_config& config, std::vector<std::unique_ptr<pool>> pools,
        reservation_maker make_reservation = {}, signal_page_maker make_signal_page = {});

  client_id add_client(const credentials& who) { return rows.add_client(who); }
  /// @brief Lets go of everything the client held; what others still hold survives.
  void remove_client(client_id client) noexcept;
  /// @brief The client's connection closed while its process lives: lets go at once of what
  /// nothing of the process can still use (host memory), and keeps what must wait for its
  /// exit: CUDA memory its GPU work may still use, and its locks, barrier and channel parties
  /// (it may still be inside a critical section, and its streams may still write its turns).
  /// @return true when something was kept: remove_client() must wait for the process to exit.
  bool end_connection(client_id client) noexcept;

  proto::stats_reply stats() const;
  proto::client_list_reply list_clients(client_id after) const;

  ledger rows;  // first: the books below refer to it
  memory_book memory;
  sync_book sync;

 private:
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace gpumem::daemon
