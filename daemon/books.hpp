#pragma once
/// @file
/// @brief The daemon's state: one ledger of every object and client, and the domain books that
/// keep beside each row what its kind needs (memory: pools; reservations: versions and sleep;
/// sync: cells,
/// slots, parties, signal pages). A client's death walks its ledger once, and each object it
/// held goes to its own book. Pure bookkeeping, no I/O: sessions and handlers call it, tests
/// drive it directly.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "events/event_hub.hpp"
#include "ledger/ledger.hpp"
#include "memory/memory_book.hpp"
#include "memory/reservation_book.hpp"
#include "metrics/activity_counters.hpp"
#include "metrics/request_counters.hpp"
#include "request_error.hpp"
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
  /// @brief Whether the last write failed: what was told since is not kept until one succeeds.
  virtual bool failing() const noexcept = 0;
  virtual std::uint64_t failed_writes() const noexcept = 0;
  /// @brief The descriptors asked to be kept: systemd drops those past the unit's
  /// FileDescriptorStoreMax without a word, so only a count kept here can warn of it.
  virtual std::size_t stored_descriptors() const noexcept = 0;
};

class books {
 public:
  /// What re-adopts a previous daemon's state (daemon/restart/) into the books, before their
  /// pools open.
  using adopter = std::function<void(books&)>;

  /// @param config with its pools resolved (resolve_pools).
  /// @param make_reservation (CUDA devices; the host's are always there), make_signal_page
  /// empty when CUDA is unavailable.
  /// @throws config_error when a configured pool cannot be made.
  books(const daemon_config& config, pool_maker make_pool, reservation_maker make_reservation = {},
        signal_page_maker make_signal_page = {}, const adopter& adopt = {});

  /// @brief A new session's row, with a fresh random token.
  client_id add_client(const credentials& who);
  /// @brief Carries a session on for a new connection: the row of @p id when it exists, no
  /// connection serves it (client_row::serving), @p token is its token and @p who is the same
  /// process (uid and pid). The row is served again from here on.
  /// @return nullopt, changing nothing, otherwise.
  std::optional<client_id> resume(client_id id, const proto::session_token& token,
                                  const credentials& who);
  /// @brief The policy's say on a new connection, once it is in the ledger.
  /// @throws request_error(permission_denied, quota_exceeded)
  void check_connection(client_id client) const;
  /// @brief The same for a connection of @p who just accepted, before it is in the ledger: a
  /// connection that never says hello is held to the rules all the same.
  void check_new_connection(const credentials& who) const;
  /// @brief Tells a refusal (permission_denied, quota_exceeded) of @p request_type as a
  /// `refused` event: client 0 for a connection refused before it had one.
  void publish_refused(client_id client, const credentials& who, const std::string& label,
                       std::uint16_t request_type, const request_error& refusal) noexcept;
  /// @brief Lets go of everything the client held; what others still hold survives.
  void remove_client(client_id client) noexcept;
  /// @brief The client is gone: remove_client(), told as events (disconnected or died, the
  /// owner-died hand-offs, what it owned that was reclaimed, end_connection()'s part included)
  /// and counted.
  /// @param died whether its process ended without closing the connection (session.hpp,
  /// closed_cleanly_): told and counted as died rather than disconnected.
  void depart(client_id client, bool died) noexcept;
  /// @brief The client's connection closed while its process lives: lets go at once of what
  /// nothing of the process can still use (host memory), and keeps what must wait for its
  /// exit: CUDA memory its GPU work may still use, and its locks, barrier and channel parties
  /// (it may still be inside a critical section, and its streams may still write its turns).
  /// The row is no longer served: the same process may resume() it until it exits. Its event
  /// subscription ends.
  /// @return true when something was kept: depart() must wait for the process to exit.
  bool end_connection(client_id client) noexcept;

  void set_keeper(state_keeper* keeper);
  void keep_process(client_id client, int pidfd) {
    if (keeper_ != nullptr && pidfd >= 0) keeper_->keep_process(client, pidfd);
  }
  /// @brief Starts the background work the requests just answered left (memory_book::
  /// start_deferred_work()); after the replies went out.
  void start_deferred_work() noexcept { memory.start_deferred_work(); }
  /// @brief Whether a restart finds what clients were told: systemd keeps the state, its last
  /// write succeeded, and it asked systemd to keep no more than fd_store_max descriptors (past
  /// them, systemd drops some without a word).
  bool state_kept() const noexcept {
    return keeper_ != nullptr && !keeper_->failing() &&
           keeper_->stored_descriptors() <= descriptors.store_max();
  }
  std::uint64_t state_write_failures() const noexcept {
    return keeper_ != nullptr ? keeper_->failed_writes() : 0;
  }
  std::size_t state_descriptors() const noexcept {
    return keeper_ != nullptr ? keeper_->stored_descriptors() : 0;
  }
  /// @brief Finishes the frees made since the last call (memory_book::settle_frees()), then
  /// writes what changed down, when a keeper is set; before every reply.
  void write_changes() noexcept {
    memory.settle_frees();
    // A new event counts as a change: its number is written down with the rest (the meta
    // record), so that a restarted daemon goes on numbering after it. Events other than
    // refusals come with changes anyway; refusals are at most 20 a second.
    if (keeper_ != nullptr && (rows.changed() || events.last_sequence() != events_written_)) {
      keeper_->write_changes();
      events_written_ = events.last_sequence();
    }
    // What was promised is stored now, or was never made (a request that failed past its
    // check changed nothing); a write that failed stores it with the next whole snapshot.
    if (keeper_ != nullptr && !keeper_->failing()) descriptors.written();
  }

  /// @brief The kFeature* bits, for hello and stats.
  std::uint32_t features() const noexcept;
  proto::stats_reply stats() const;
  /// @brief Use and quota per uid: the asker's own, or every uid for an administrator.
  proto::usage_list_reply list_usage(client_id asker, std::uint64_t after_uid) const;
  /// @brief The clients @p asker may see: its own uid's, or all for an administrator.
  proto::client_list_reply list_clients(client_id asker, client_id after) const;

  // Declared in this order: the books below refer to the ledger and the policies.
  access_policy access;
  quota_policy quotas;
  /// Room in systemd's fd store, counted once a keeper is set.
  descriptor_budget descriptors;
  ledger rows;
  memory_book memory;
  reservation_book reservations;
  sync_book sync;
  /// This daemon's identity in hello replies: random at a clean start, kept when a restarted
  /// daemon takes its predecessor's state over (then ids of pools, pages, objects still hold).
  std::uint64_t instance;
  /// What the metrics count beside the books (daemon/metrics/), and the event stream.
  metrics::request_counters requests;
  metrics::activity_counters activity;
  event_hub events;
  /// Clients taken over from a previous daemon at start, whose processes still lived.
  std::size_t readopted_clients = 0;
  std::chrono::system_clock::time_point started_at = std::chrono::system_clock::now();

 private:
  /// A lock's holder died holding it: counted, and told as an event about @p dead.
  void tell_owner_death(const sync_book::owner_death& death) noexcept;

  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  state_keeper* keeper_ = nullptr;
  /// The last event number written down (write_changes()).
  std::uint64_t events_written_ = 0;
  /// What end_connection() let go of for clients whose departure is still to come.
  std::unordered_map<client_id, usage> let_go_early_;
  /// The client depart() is removing, to name in its owner-died events (its ledger row goes
  /// before its objects do).
  struct departing_client {
    client_id id;
    credentials who;
    std::string label;
  };
  std::optional<departing_client> departing_;
};

}  // namespace gpumem::daemon
