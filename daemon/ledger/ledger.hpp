#pragma once
/// @file
/// @brief daemon/ledger/: the one table of everything the daemon hands out, and of who holds it.
///
/// Every object a client can name or hold (allocations, reservations, locks, barriers,
/// channels) is one row here: id, kind, name, owner client and uid, bytes, and its holders with
/// their reference counts. Every connected client is one row too, with the set of objects it
/// holds, so that a death walks exactly what the client held, once. The ledger is plain data
/// keyed by ids (no pointers into backends), so that it can be written out and read back, and it
/// is the one place that answers "what does client C, or uid U, hold". It decides nothing about
/// memory or cells: the domain books (daemon/memory/, daemon/sync/) keep what each kind needs
/// beside its row, and erase the row when the object is gone. No I/O.
/// May include: proto/ and shared/ headers, daemon/request_error.hpp. Nothing else of the daemon.

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumem/proto/messages.hpp"

namespace gpumem::daemon {

using client_id = std::uint64_t;
using object_id = std::uint64_t;

struct credentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  ///< supplementary groups, as the kernel reported them at connect

  bool in_group(gid_t group) const noexcept {
    return gid == group || std::find(groups.begin(), groups.end(), group) != groups.end();
  }
};

enum class object_kind : std::uint8_t { allocation, reservation, lock, barrier, channel };

/// Names are unique within a family: an allocation, a reservation and a lock may share a name,
/// but a lock and a barrier may not (they open by name with the kind checked).
/// @brief A name as the ledger stores it, back on the wire (it was checked on the way in).
inline proto::wire_name to_wire(const std::string& stored) {
  proto::wire_name name{};
  (void)proto::make_wire_name(stored, name);
  return name;
}

enum class object_family : std::uint8_t { allocation, reservation, sync };
inline constexpr std::size_t kFamilyCount = 3;

constexpr object_family family_of(object_kind kind) noexcept {
  switch (kind) {
    case object_kind::allocation:
      return object_family::allocation;
    case object_kind::reservation:
      return object_family::reservation;
    default:
      return object_family::sync;
  }
}

/// "allocation", "lock", ... for messages.
const char* kind_name(object_kind kind) noexcept;
/// "allocation", "reservation", "lock, barrier or channel", for "no ... named" messages.
const char* family_name(object_family family) noexcept;

/// What an object is made as, besides its owner.
struct object_spec {
  object_kind kind;
  std::string name;  ///< empty for an anonymous object
  std::uint64_t bytes = 0;
  std::int32_t device = proto::kHostDevice;  ///< where its bytes are; host for sync objects
  mode_t mode = 0600;                        ///< rw bits for owner uid, owner gid, others
};

struct object_row {
  object_kind kind;
  std::string name;  ///< empty for an anonymous object
  client_id owner;   ///< 0 once the owner let go while others still hold it
  uid_t owner_uid;
  gid_t owner_gid;  ///< the maker's primary group: the group of its mode bits and quotas
  mode_t mode;
  std::int32_t device;
  std::uint64_t bytes;                         ///< memory the object takes; 0 for sync objects
  std::map<client_id, std::uint32_t> holders;  ///< client -> references (the owner included)
};

/// What an account (uid, gid) or a client owns, kept up to date as objects come and go, so
/// that a quota check costs a lookup.
struct usage {
  std::uint64_t host_bytes = 0;
  std::uint64_t device_bytes = 0;
  std::uint64_t memory_objects = 0;  ///< allocations and reservations
  std::uint64_t sync_objects = 0;
  std::uint64_t connections = 0;
  /// Of the connections, sessions that no connection serves now: each awaits its process's
  /// resume (after a restart, or a connection that broke while its process lives).
  std::uint64_t awaiting_resume = 0;

  friend bool operator==(const usage&, const usage&) = default;
};

/// The last request of a client that changed the daemon's state (and got no descriptor), with
/// the reply frame it got: a client that resumes its session after a restart sends its call in
/// flight again, with the same id, and gets this reply instead of a second execution.
struct answered_request {
  std::uint32_t request_id = 0;  ///< 0: none yet (clients number their requests from 1)
  proto::message_type type{};
  std::vector<std::byte> reply;  ///< the whole frame, header included
};

struct client_row {
  credentials who;
  std::string label;
  std::chrono::steady_clock::time_point connected;
  std::set<object_id> holds;     ///< objects of which it holds at least one reference
  usage owns;                    ///< what it made and still holds
  proto::session_token token{};  ///< what a hello must show to resume this session
  /// A connection serves the row now. False once its connection closed while its process
  /// lives on (the row kept for the process's exit), and for rows a restarted daemon took over:
  /// only then may a new connection of the same process resume it.
  bool serving = true;
  answered_request last_answered;
  /// The pid the client reported at hello, as its own PID namespace numbers it: shown beside
  /// who.pid (0 when the kernel cannot name the peer in the daemon's namespace), never trusted
  /// for a decision. 0: not reported.
  std::uint32_t reported_pid = 0;
  /// The connection subscribed to events. A stream ends with its daemon and is never resumed
  /// (a reader subscribes anew), so a restarted daemon lets go at once of such a row that holds
  /// nothing (restart/state_store.cpp) rather than keep it until the process exits.
  bool streams_events = false;
};

/// What changed since the state store (daemon/restart/) last wrote the daemon's state down:
/// the keys of the rows and backends to write again (or to forget, when gone). Kept only while
/// a store is in use, so that a daemon without one pays nothing.
struct change_set {
  /// Ids in the order touched (a repeat of the last one dropped at once, others kept) until
  /// settle() sorts them and drops the repeats: a list whose room is kept from one request to
  /// the next, where a set took a node allocation per touch. It grows with the touches of one
  /// turn of the loop, which write_changes() then takes.
  template <class Id>
  struct touched {
    std::vector<Id> ids;
    void add(Id id) {
      if (ids.empty() || ids.back() != id) ids.push_back(id);
    }
    void settle() noexcept {
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    }
    bool empty() const noexcept { return ids.empty(); }
    auto begin() const noexcept { return ids.begin(); }
    auto end() const noexcept { return ids.end(); }
  };
  touched<object_id> objects;
  touched<client_id> clients;
  touched<std::uint32_t> pools;  ///< pool instances (daemon/memory/)
  touched<std::uint32_t> pages;  ///< lock and barrier pages (daemon/sync/)

  bool any() const noexcept {
    return !objects.empty() || !clients.empty() || !pools.empty() || !pages.empty();
  }
  void settle() noexcept {
    objects.settle();
    clients.settle();
    pools.settle();
    pages.settle();
  }
  void clear() noexcept {
    objects.ids.clear();
    clients.ids.clear();
    pools.ids.clear();
    pages.ids.clear();
  }
};

/// What one client, or every client of one uid, holds of one family.
struct holdings {
  std::uint32_t owned = 0;   ///< objects it made and still holds
  std::uint32_t opened = 0;  ///< objects it holds that another made
  std::uint64_t bytes_owned = 0;
};
struct holdings_by_family {
  std::array<holdings, kFamilyCount> families{};
  holdings& operator[](object_family family) noexcept {
    return families[static_cast<std::size_t>(family)];
  }
  const holdings& operator[](object_family family) const noexcept {
    return families[static_cast<std::size_t>(family)];
  }
};

class ledger {
 public:
  using clock = std::chrono::steady_clock;

  /// @param token the session's secret, random (the ledger does no I/O).
  client_id add_client(const credentials& who, const proto::session_token& token);
  /// @brief What the client says of itself at hello: its label and its pid in its own PID
  /// namespace (client_row::reported_pid).
  void set_label(client_id client, std::string label, std::uint32_t reported_pid);
  /// @brief Whether a connection serves the client now (client_row::serving).
  void set_serving(client_id client, bool serving) noexcept;
  /// @brief The client's connection streams events from now on (client_row::streams_events).
  void set_streams_events(client_id client);
  /// @brief Keeps the reply to the client's last request that changed state (answered_request);
  /// nothing for a client the ledger no longer knows.
  void set_answered(client_id client, std::uint32_t request_id, proto::message_type type,
                    std::span<const std::byte> reply);
  /// @throws request_error(internal) for a client the ledger does not know.
  const client_row& client(client_id client) const;
  const std::map<client_id, client_row>& clients() const noexcept { return clients_; }

  /// @brief Adds an object that @p owner holds once.
  /// @throws request_error(already_exists) when @p name is taken in the kind's family.
  object_id add(client_id owner, object_spec spec);
  object_id add(object_kind kind, std::string name, client_id owner, std::uint64_t bytes) {
    return add(owner, {kind, std::move(name), bytes});
  }
  /// @brief The object's memory changed (a reservation grew or shrank).
  void set_bytes(object_id id, std::uint64_t bytes) noexcept;
  std::optional<object_id> find_name(object_family family, std::string_view name) const;
  object_row* find(object_id id) noexcept;
  const object_row* find(object_id id) const noexcept;
  /// @brief The object @p client holds under @p id, of @p family.
  /// @throws request_error(not_found) "this client holds no <family> <id>" otherwise.
  object_row& held(client_id client, object_id id, object_family family);

  /// @brief One more reference of @p client to @p id. @return true when it is its first.
  bool hold(object_id id, client_id client);
  /// @brief One reference fewer. @return true when @p client holds none any more: it is no
  /// longer a holder, and no longer the owner.
  bool drop_reference(object_id id, client_id client);
  /// @brief Forgets the object and frees its name. The domain book calls it once the object
  /// is gone (its last holder let go and nothing of it is pending).
  void erase(object_id id) noexcept;

  /// @brief Takes every reference of @p client off every object it holds, calling
  /// @p let_go(id, row) for each (the row then no longer lists the client), then forgets the
  /// client. @p let_go may erase the row.
  template <class LetGo>
  void remove_client(client_id client, LetGo&& let_go) noexcept;

  holdings_by_family holdings_of(client_id client) const;
  holdings_by_family holdings_of_uid(uid_t uid) const;
  /// @brief What objects whose owner uid (gid) is @p uid (@p gid) take, however many clients
  /// hold them, and the uid's connections.
  usage usage_of_uid(uid_t uid) const;
  /// @brief Every uid that owns something or is connected, with what it owns, by uid.
  std::map<uid_t, usage> usage_by_uid() const;
  usage usage_of_gid(gid_t gid) const;
  /// @brief Clients a connection serves now (client_row::serving): the connections open.
  std::uint64_t connections_served() const noexcept { return connections_served_; }
  std::size_t count(object_family family) const noexcept { return ids_[index(family)].size(); }
  const std::map<object_id, object_row>& objects() const noexcept { return objects_; }

  /// @brief Starts keeping a change_set.
  void track_changes() noexcept { tracking_ = true; }
  /// @brief Marks what the ledger cannot see change: a book's part of an object, a client's,
  /// a pool's or a page's. No-ops unless changes are tracked.
  void touch(object_id id) {
    if (tracking_) changes_.objects.add(id);
  }
  void touch_client(client_id id) {
    if (tracking_) changes_.clients.add(id);
  }
  void touch_pool(std::uint32_t id) {
    if (tracking_) changes_.pools.add(id);
  }
  void touch_page(std::uint32_t id) {
    if (tracking_) changes_.pages.add(id);
  }
  bool changed() const noexcept { return changes_.any(); }
  /// @brief Moves what changed into @p into, each kind's ids sorted and once, and gives the
  /// ledger @p into's lists, emptied, to fill next: their room goes back and forth.
  void take_changes(change_set& into) noexcept {
    changes_.settle();
    std::swap(changes_, into);
    changes_.clear();
  }

  /// @brief Re-adoption (daemon/restart/): puts back a client and its row as a previous
  /// daemon left them. Clients first, then objects, whose holders must be known clients
  /// (others are dropped), then the id counters.
  void restore_client(client_id id, client_row row);
  void restore_object(object_id id, object_row row);
  void restore_next_ids(object_id next_object, client_id next_client) noexcept;
  object_id next_object_id() const noexcept { return next_object_id_; }
  client_id next_client_id() const noexcept { return next_client_id_; }

  /// @brief One page of @p family's rows with ids above @p after for which @p keep(row) holds,
  /// in id order, each turned into a record by @p make(id, row).
  template <class Record, class Keep, class Make>
  proto::list_payload<proto::list_head, Record> page(object_family family, object_id after,
                                                     std::size_t limit, Keep&& keep,
                                                     Make&& make) const;
  /// @brief Likewise for clients, by @p keep(client_row) and @p make(id, client_row).
  template <class Record, class Keep, class Make>
  proto::list_payload<proto::list_head, Record> client_page(client_id after, std::size_t limit,
                                                            Keep&& keep, Make&& make) const;

 private:
  static constexpr std::size_t index(object_family family) noexcept {
    return static_cast<std::size_t>(family);
  }
  void add_holdings(holdings_by_family& into, client_id client, const client_row& row) const;
  /// Adds (sign +1) or takes off (-1) what @p row takes to or from @p into.
  static void count(usage& into, const object_row& row, int sign) noexcept;
  /// Adds (+1) or takes off (-1) @p client's connection, and its wait for a resume while no
  /// connection serves it, in its uid's and gid's usage; or the connection served, node-wide.
  void count_connection(const client_row& client, int sign) noexcept;
  /// The owner client let go: what it owns no longer counts for it.
  void disown(object_row& row) noexcept;

  using object_map = std::map<object_id, object_row>;
  using id_set = std::set<object_id>;
  /// Where an object's row lies in objects_ and in its family's ids_. A request finds, and
  /// erases, its row through this hash instead of walking down trees of every live object:
  /// with 10^6 live objects each walk is some twenty cache misses.
  struct row_place {
    object_map::iterator row;
    id_set::iterator in_family;
  };
  /// Adds a row for an id above every other (new objects) or anywhere (re-adoption).
  const object_row& place(object_id id, object_row row);

  /// In id order, for snapshots and listings.
  object_map objects_;
  /// Each family's ids in order, so that a page of one family never walks the others.
  std::array<id_set, kFamilyCount> ids_;
  std::unordered_map<object_id, row_place> places_;
  /// Looked up by the name's view: a request's name is not copied to find it.
  struct name_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const noexcept {
      return std::hash<std::string_view>{}(name);
    }
  };
  std::array<std::unordered_map<std::string, object_id, name_hash, std::equal_to<>>, kFamilyCount>
      names_;
  std::map<client_id, client_row> clients_;
  std::unordered_map<uid_t, usage> by_uid_;
  std::unordered_map<gid_t, usage> by_gid_;
  std::uint64_t connections_served_ = 0;
  object_id next_object_id_ = 1;
  client_id next_client_id_ = 1;
  bool tracking_ = false;
  change_set changes_;
};

template <class LetGo>
void ledger::remove_client(client_id client, LetGo&& let_go) noexcept {
  const auto found = clients_.find(client);
  if (found == clients_.end()) return;
  const std::set<object_id> held = std::move(found->second.holds);
  touch_client(client);
  for (const object_id id : held) touch(id);
  count_connection(found->second, -1);
  for (const object_id id : held) {
    object_row* row = find(id);
    if (row == nullptr) continue;
    row->holders.erase(client);
    if (row->owner == client) disown(*row);
  }
  clients_.erase(found);
  for (const object_id id : held) {
    if (object_row* row = find(id)) let_go(id, *row);
  }
}

template <class Record, class Keep, class Make>
proto::list_payload<proto::list_head, Record> ledger::page(object_family family, object_id after,
                                                           std::size_t limit, Keep&& keep,
                                                           Make&& make) const {
  proto::list_payload<proto::list_head, Record> reply;
  const std::set<object_id>& ids = ids_[index(family)];
  for (auto id = ids.upper_bound(after); id != ids.end(); ++id) {
    const object_row& row = places_.at(*id).row->second;
    if (!keep(row)) continue;
    if (reply.records.size() == limit) {
      reply.head.more = 1;
      break;
    }
    reply.records.push_back(make(*id, row));
  }
  reply.head.count = static_cast<std::uint32_t>(reply.records.size());
  return reply;
}

template <class Record, class Keep, class Make>
proto::list_payload<proto::list_head, Record> ledger::client_page(client_id after,
                                                                  std::size_t limit, Keep&& keep,
                                                                  Make&& make) const {
  proto::list_payload<proto::list_head, Record> reply;
  for (auto it = clients_.upper_bound(after); it != clients_.end(); ++it) {
    if (!keep(it->second)) continue;
    if (reply.records.size() == limit) {
      reply.head.more = 1;
      break;
    }
    reply.records.push_back(make(it->first, it->second));
  }
  reply.head.count = static_cast<std::uint32_t>(reply.records.size());
  return reply;
}

}  // namespace gpumem::daemon
