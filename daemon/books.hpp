#pragma once
/// @file
/// @brief The daemon's state: one ledger of every object and client, and the domain books that
/// keep beside each row what its kind needs (memory: pools and reservations; sync: cells,
/// slots, parties, signal pages). A client's death walks its ledger once, and each object it
/// held goes to its own book. Pure bookkeeping, no I/O: sessions and handlers call it, tests
/// drive it directly.

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "config/config.hpp"
#include "ledger/ledger.hpp"
#include "memory/memory_book.hpp"
#include "sync/sync_book.hpp"

namespace gpumem::daemon {

/// @brief Keeps the books' state where it outlives the daemon (daemon/restart/): told of each
/// client's process, and asked to write the changes down before any reply goes out, so that
/// a restarted daemon knows everything a client was told.
class state_keeper {
 public:
  virtual ~state_keeper() = default;
  /// @param pidfd the client's process; the keeper dups what it keeps.
  virtual void keep_process(client_id client, int pidfd) = 0;
  virtual void write_changes() noexcept = 0;
};

class books {
 public:
  /// What re-adopts a previous daemon's state (daemon/restart/) into the books, before their
  /// pools open.
  using adopter = std::function<void(books&)>;

  /// @param config with its pools resolved (resolve_pools).
  /// @param make_reservation, make_signal_page empty when CUDA is unavailable.
  /// @throws config_error when a configured pool cannot be made.
  books(const daemon_config& config, pool_maker make_pool, reservation_maker make_reservation = {},
        signal_page_maker make_signal_page = {}, const adopter& adopt = {});

  client_id add_client(const credentials& who) { return rows.add_client(who); }
  /// @brief The policy's say on a new connection, once it is in the ledger.
  /// @throws request_error(permission_denied, quota_exceeded)
  void check_connection(client_id client) const;
  /// @brief Lets go of everything the client held; what others still hold survives.
  void remove_client(client_id client) noexcept;
  /// @brief The client's connection closed while its process lives: lets go at once of what
  /// nothing of the process can still use (host memory), and keeps what must wait for its
  /// exit: CUDA memory its GPU work may still use, and its locks, barrier and channel parties
  /// (it may still be inside a critical section, and its streams may still write its turns).
  /// @return true when something was kept: remove_client() must wait for the process to exit.
  bool end_connection(client_id client) noexcept;

  void set_keeper(state_keeper* keeper) noexcept { keeper_ = keeper; }
  bool keeps_state() const noexcept { return keeper_ != nullptr; }
  void keep_process(client_id client, int pidfd) {
    if (keeper_ != nullptr && pidfd >= 0) keeper_->keep_process(client, pidfd);
  }
  /// @brief Writes what changed down, when a keeper is set; before every reply.
  void write_changes() noexcept {
    if (keeper_ != nullptr && rows.changed()) keeper_->write_changes();
  }

  proto::stats_reply stats() const;
  /// @brief Use and quota per uid: the asker's own, or every uid for an administrator.
  proto::usage_list_reply list_usage(client_id asker, std::uint64_t after_uid) const;
  /// @brief The clients @p asker may see: its own uid's, or all for an administrator.
  proto::client_list_reply list_clients(client_id asker, client_id after) const;

  // Declared in this order: the books below refer to the ledger and the policies.
  access_policy access;
  quota_policy quotas;
  ledger rows;
  memory_book memory;
  sync_book sync;

 private:
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  state_keeper* keeper_ = nullptr;
};

}  // namespace gpumem::daemon
