#include "books.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <set>
#include <stdexcept>
#include <string>

#include "gpumem/proto/codec.hpp"

namespace gpumem::daemon {

namespace {
std::uint64_t milliseconds_since(std::chrono::steady_clock::time_point then) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - then)
          .count());
}

// Never zero: zero means "none" on the wire.
std::uint64_t random_nonzero() {
  std::uint64_t value = 0;
  while (value == 0) {
    // A getrandom of at most 256 bytes is never cut short once the pool is ready.
    if (::getrandom(&value, sizeof value, 0) != static_cast<ssize_t>(sizeof value)) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
  }
  return value;
}

// No early exit: how long a refusal takes must not tell how much of a guess was right.
bool same_token(const proto::session_token& a, const proto::session_token& b) noexcept {
  return ((a.words[0] ^ b.words[0]) | (a.words[1] ^ b.words[1])) == 0;
}
}  // namespace

books::books(const daemon_config& config, pool_maker make_pool, reservation_maker make_reservation,
             signal_page_maker make_signal_page, const adopter& adopt)
    // The socket is made by this process, so its group is the daemon's group.
    : access(config.access, ::geteuid(), ::getegid()),
      quotas(config.quotas),
      memory(rows, access, quotas, descriptors, config, std::move(make_pool)),
      reservations(rows, access, quotas, descriptors, std::move(make_reservation)),
      sync(rows, access, quotas, descriptors, std::move(make_signal_page)),
      instance(random_nonzero()) {
  descriptors.configure(config.fd_store_max, config.max_connections);
  if (adopt) adopt(*this);
  readopted_clients = rows.clients().size();
  memory.open_pools();
  sync.on_owner_death([this](const sync_book::owner_death& death) { tell_owner_death(death); });
}

void books::set_keeper(state_keeper* keeper) {
  keeper_ = keeper;
  events_written_ = events.last_sequence();  // re-adopted: the number came from the state
  if (keeper == nullptr) {
    descriptors.count_with({});
  } else {
    descriptors.count_with({.kept_now = [keeper] { return keeper->stored_descriptors(); },
                            .connections_now = [this] { return rows.connections_served(); },
                            .to_come = [this] { return reservations.descriptors_to_come(); }});
  }
}

client_id books::add_client(const credentials& who) {
  return rows.add_client(who, {{random_nonzero(), random_nonzero()}});
}

std::optional<client_id> books::resume(client_id id, const proto::session_token& token,
                                       const credentials& who) {
  const auto found = rows.clients().find(id);
  if (found == rows.clients().end()) return std::nullopt;
  const client_row& row = found->second;
  if (!same_token(row.token, token) || row.serving || row.who.uid != who.uid ||
      row.who.pid != who.pid) {
    return std::nullopt;
  }
  rows.set_serving(id, true);
  let_go_early_.erase(id);  // not gone after all
  return id;
}

void books::check_connection(client_id client) const {
  access.check_connect(rows.client(client).who);
  quotas.check_connection(rows, client);
}

void books::check_new_connection(const credentials& who) const {
  access.check_connect(who);
  quotas.check_new_connection(rows, who);
}

void books::publish_refused(client_id client, const credentials& who, const std::string& label,
                            std::uint16_t request_type, const request_error& refusal) noexcept {
  proto::event_record refused = event_hub::about(proto::event_kind::refused, client, who, label);
  refused.code = static_cast<std::uint32_t>(refusal.code());
  refused.request_type = request_type;
  const proto::error_reply text = proto::make_error_reply(refusal.code(), refusal.what());
  static_assert(sizeof refused.reason <= sizeof text.text);
  std::memcpy(refused.reason, text.text, sizeof refused.reason - 1);
  events.publish_refusal(refused);
}

void books::remove_client(client_id client) noexcept {
  rows.remove_client(client, [&](object_id id, const object_row& row) {
    switch (family_of(row.kind)) {
      case object_family::sync:
        sync.let_go(id, row, client);
        break;
      case object_family::reservation:
        reservations.let_go(id, row);
        break;
      case object_family::allocation:
        memory.let_go(id, row);
        break;
    }
  });
  sync.detach(client);
  memory.forget_holder(client);
}

void books::depart(client_id client, bool died) noexcept {
  const auto found = rows.clients().find(client);
  if (found == rows.clients().end()) return;
  const client_row& row = found->second;
  usage owned = row.owns;
  if (const auto early = let_go_early_.find(client); early != let_go_early_.end()) {
    owned.host_bytes += early->second.host_bytes;
    owned.device_bytes += early->second.device_bytes;
    owned.memory_objects += early->second.memory_objects;
    owned.sync_objects += early->second.sync_objects;
    let_go_early_.erase(early);
  }
  events.unsubscribe(client);
  ++(died ? activity.died : activity.disconnected);
  const auto kind = died ? proto::event_kind::died : proto::event_kind::disconnected;
  try {
    departing_ = departing_client{client, row.who, row.label};
  } catch (const std::bad_alloc&) {
    departing_.reset();  // its owner-died events name no client then
  }
  proto::event_record reclaimed =
      event_hub::about(proto::event_kind::reclaimed, client, row.who, row.label);
  events.publish(event_hub::about(kind, client, row.who, row.label));
  remove_client(client);
  departing_.reset();
  reclaimed.bytes = owned.host_bytes + owned.device_bytes;
  reclaimed.count = owned.memory_objects + owned.sync_objects;
  activity.reclaimed_bytes += reclaimed.bytes;
  activity.reclaimed_objects += reclaimed.count;
  if (reclaimed.bytes != 0 || reclaimed.count != 0) events.publish(reclaimed);
}

void books::tell_owner_death(const sync_book::owner_death& death) noexcept {
  ++activity.owner_deaths;
  proto::event_record event{};
  const auto live = rows.clients().find(death.dead_client);
  if (departing_ && departing_->id == death.dead_client) {
    event = event_hub::about(proto::event_kind::owner_died, departing_->id, departing_->who,
                             departing_->label);
  } else if (death.dead_client != 0 && live != rows.clients().end()) {
    // A live client that closed the last Lock of the name it held (sync_book::close).
    event = event_hub::about(proto::event_kind::owner_died, live->first, live->second.who,
                             live->second.label);
    static constexpr char kClosed[] = "closed its last Lock of the name while holding it";
    static_assert(sizeof kClosed <= sizeof event.reason);
    std::memcpy(event.reason, kClosed, sizeof kClosed);
  } else {
    // A clean-up that was pending: the holder's client is gone from the ledger; the lock's
    // owner is whom it concerns.
    event.kind = proto::event_kind::owner_died;
    event.pid = static_cast<std::uint32_t>(death.dead_pid);
    event.uid = death.row.owner_uid;
  }
  (void)proto::make_wire_name(death.row.name, event.object);
  events.publish(event);
}

bool books::end_connection(client_id client) noexcept {
  const auto found = rows.clients().find(client);
  if (found == rows.clients().end()) return false;
  events.unsubscribe(client);
  memory.forget_holder(client);  // no release comes from it until it resumes
  const usage owned_before = found->second.owns;
  rows.set_serving(client, false);
  const std::set<object_id> held = found->second.holds;
  bool kept = false;
  for (const object_id id : held) {
    const object_row& row = *rows.find(id);
    // A reservation's chunks stay mapped in the process until it exits.
    if (family_of(row.kind) != object_family::allocation || memory.needs_process_exit(id, row)) {
      kept = true;
      continue;
    }
    bool last_reference = false;
    while (!last_reference) last_reference = rows.drop_reference(id, client);
    memory.let_go(id, row);
  }
  const usage& owned_after = found->second.owns;
  try {
    usage& early = let_go_early_[client];
    early.host_bytes += owned_before.host_bytes - owned_after.host_bytes;
    early.device_bytes += owned_before.device_bytes - owned_after.device_bytes;
    early.memory_objects += owned_before.memory_objects - owned_after.memory_objects;
    early.sync_objects += owned_before.sync_objects - owned_after.sync_objects;
  } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): only an event's figure
  }
  return kept;
}

std::uint32_t books::features() const noexcept {
  return memory.features() | (state_kept() ? proto::kFeatureStateKept : 0u) |
         proto::kFeatureSendsSyncPage | proto::kFeatureMailbox | proto::kFeatureChannelLayout |
         proto::kFeatureOwnOnly;
}

proto::stats_reply books::stats() const {
  proto::stats_reply reply = memory.stats();
  reply.head.client_count = static_cast<std::uint32_t>(rows.clients().size());
  reply.head.uptime_ms = milliseconds_since(started_);
  reply.head.features = features();
  return reply;
}

proto::usage_list_reply books::list_usage(client_id asker, std::uint64_t after_uid) const {
  const credentials& who = rows.client(asker).who;
  const bool everyone = access.is_admin(who);
  const auto limit = [](const std::optional<std::uint64_t>& value) {
    return value.value_or(proto::kNoLimit);
  };
  proto::usage_list_reply reply;
  // uid + 1 pages: uid 0 is a real uid, and "after 0" must still list it.
  for (const auto& [uid, used] : rows.usage_by_uid()) {
    if (std::uint64_t{uid} + 1 <= after_uid || (!everyone && uid != who.uid)) continue;
    if (reply.records.size() == memory_book::kPageSize) {
      reply.head.more = 1;
      break;
    }
    const quota_limits limits = quotas.limits_of_uid(uid);
    reply.records.push_back({uid, 0, used.connections, used.host_bytes, used.device_bytes,
                             used.memory_objects, used.sync_objects, limit(limits.connections),
                             limit(limits.bytes), limit(limits.allocations),
                             limit(limits.sync_objects)});
  }
  reply.head.count = static_cast<std::uint32_t>(reply.records.size());
  return reply;
}

proto::client_list_reply books::list_clients(client_id asker, client_id after) const {
  const credentials& who = rows.client(asker).who;
  return rows.client_page<proto::client_record>(
      after, memory_book::kPageSize,
      [&](const client_row& entry) { return access.may_see_client(who, entry.who); },
      [&](client_id id, const client_row& entry) {
        // Reservations count with allocations, as the allocations quota counts them.
        const holdings_by_family held = rows.holdings_of(id);
        const holdings& allocations = held[object_family::allocation];
        const holdings& reserved = held[object_family::reservation];
        proto::client_record record{};
        record.client_id = id;
        record.pid = static_cast<std::uint32_t>(entry.who.pid);
        record.client_pid = entry.reported_pid;
        record.uid = entry.who.uid;
        record.gid = entry.who.gid;
        record.allocations_owned = allocations.owned + reserved.owned;
        record.allocations_opened = allocations.opened + reserved.opened;
        record.bytes_owned = allocations.bytes_owned + reserved.bytes_owned;
        record.connected_ms = milliseconds_since(entry.connected);
        (void)proto::make_wire_name(entry.label, record.label);
        return record;
      });
}

}  // namespace gpumem::daemon
