#include "ledger/ledger.hpp"

#include <fmt/format.h>

#include <cassert>

#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;

const char* kind_name(object_kind kind) noexcept {
  switch (kind) {
    case object_kind::allocation:
      return "allocation";
    case object_kind::reservation:
      return "reservation";
    case object_kind::lock:
      return "lock";
    case object_kind::barrier:
      return "barrier";
    case object_kind::channel:
      return "channel";
  }
  return "object";
}

const char* family_name(object_family family) noexcept {
  switch (family) {
    case object_family::allocation:
      return "allocation";
    case object_family::reservation:
      return "reservation";
    case object_family::sync:
      return "lock, barrier or channel";
  }
  return "object";
}

client_id ledger::add_client(const credentials& who, const proto::session_token& token) {
  const client_id id = next_client_id_++;
  const auto [added, inserted] =
      clients_.emplace(id, client_row{who, {}, clock::now(), {}, {}, token, true, {}, 0});
  count_connection(added->second, +1);
  touch_client(id);
  return id;
}

void ledger::set_label(client_id client, std::string label, std::uint32_t reported_pid) {
  client_row& row = clients_.at(client);
  row.label = std::move(label);
  row.reported_pid = reported_pid;
  touch_client(client);
}

void ledger::restore_client(client_id id, client_row row) {
  row.holds.clear();
  row.owns = {};
  // No connection serves it until its process resumes the session.
  row.serving = false;
  if (const auto replaced = clients_.find(id); replaced != clients_.end()) {
    count_connection(replaced->second, -1);
  }
  const auto [restored, inserted] = clients_.insert_or_assign(id, std::move(row));
  count_connection(restored->second, +1);
}

void ledger::restore_object(object_id id, object_row row) {
  std::erase_if(row.holders, [&](const auto& holder) {
    return holder.second == 0 || !clients_.contains(holder.first);
  });
  if (!clients_.contains(row.owner) || !row.holders.contains(row.owner)) row.owner = 0;
  const auto family = index(family_of(row.kind));
  if (!row.name.empty() && !names_[family].emplace(row.name, id).second) {
    throw request_error(errc::already_exists,
                        fmt::format("{} {} and another object are both named '{}'",
                                    kind_name(row.kind), id, row.name));
  }
  for (const auto& [holder, references] : row.holders) clients_.at(holder).holds.insert(id);
  const object_row& placed = place(id, std::move(row));
  count(by_uid_[placed.owner_uid], placed, +1);
  count(by_gid_[placed.owner_gid], placed, +1);
  if (placed.owner != 0) count(clients_.at(placed.owner).owns, placed, +1);
  next_object_id_ = std::max(next_object_id_, id + 1);
}

void ledger::restore_next_ids(object_id next_object, client_id next_client) noexcept {
  next_object_id_ = std::max(next_object_id_, next_object);
  next_client_id_ = std::max(next_client_id_, next_client);
}

void ledger::set_serving(client_id client, bool serving) noexcept {
  const auto found = clients_.find(client);
  if (found == clients_.end() || found->second.serving == serving) return;
  count_connection(found->second, -1);
  found->second.serving = serving;
  count_connection(found->second, +1);
}

void ledger::count_connection(const client_row& client, int sign) noexcept {
  const auto add = [sign](std::uint64_t& field) {
    assert(sign > 0 || field > 0);  // taken off once more than counted: a transition missed
    field = sign > 0 ? field + 1 : field - 1;
  };
  for (usage* account : {&by_uid_[client.who.uid], &by_gid_[client.who.gid]}) {
    add(account->connections);
    if (!client.serving) add(account->awaiting_resume);
  }
  if (client.serving) add(connections_served_);
}

void ledger::set_streams_events(client_id client) {
  clients_.at(client).streams_events = true;
  touch_client(client);
}

void ledger::set_answered(client_id client, std::uint32_t request_id, proto::message_type type,
                          std::span<const std::byte> reply) {
  const auto found = clients_.find(client);
  if (found == clients_.end()) return;
  answered_request& last = found->second.last_answered;
  last.request_id = request_id;
  last.type = type;
  last.reply.assign(reply.begin(), reply.end());
  touch_client(client);
}

const client_row& ledger::client(client_id client) const {
  const auto found = clients_.find(client);
  if (found == clients_.end()) throw request_error(errc::internal, "unknown client");
  return found->second;
}

object_id ledger::add(client_id owner, object_spec spec) {
  const auto family = index(family_of(spec.kind));
  client_row& maker = clients_.at(owner);
  if (!spec.name.empty() && names_[family].contains(spec.name)) {
    throw request_error(errc::already_exists,
                        fmt::format("{} {} named '{}' already exists",
                                    spec.kind == object_kind::allocation ? "an" : "a",
                                    family_name(family_of(spec.kind)), spec.name));
  }
  const object_id id = next_object_id_++;
  const object_row& row = place(id, object_row{spec.kind,
                                               std::move(spec.name),
                                               owner,
                                               maker.who.uid,
                                               maker.who.gid,
                                               spec.mode,
                                               spec.device,
                                               spec.bytes,
                                               {{owner, 1}}});
  try {
    touch(id);
    if (!row.name.empty()) names_[family].emplace(row.name, id);
    maker.holds.insert(id);
    count(by_uid_[row.owner_uid], row, +1);
    count(by_gid_[row.owner_gid], row, +1);
    count(maker.owns, row, +1);
  } catch (...) {
    erase(id);
    throw;
  }
  return id;
}

const object_row& ledger::place(object_id id, object_row row) {
  const auto family = index(family_of(row.kind));
  // New ids are above every other: the hint makes each insert constant time.
  const auto placed = objects_.insert_or_assign(objects_.end(), id, std::move(row));
  try {
    const auto in_family = ids_[family].insert(ids_[family].end(), id);
    try {
      places_.insert_or_assign(id, row_place{placed, in_family});
    } catch (...) {
      ids_[family].erase(in_family);
      throw;
    }
  } catch (...) {
    objects_.erase(placed);
    throw;
  }
  return placed->second;
}

void ledger::count(usage& into, const object_row& row, int sign) noexcept {
  const auto add = [sign](std::uint64_t& field, std::uint64_t amount) {
    field = sign > 0 ? field + amount : field - amount;
  };
  if (family_of(row.kind) == object_family::sync) {
    add(into.sync_objects, 1);
    return;
  }
  add(into.memory_objects, 1);
  add(row.device == proto::kHostDevice ? into.host_bytes : into.device_bytes, row.bytes);
}

void ledger::disown(object_row& row) noexcept {
  if (const auto maker = clients_.find(row.owner); maker != clients_.end()) {
    count(maker->second.owns, row, -1);
  }
  row.owner = 0;
}

void ledger::set_bytes(object_id id, std::uint64_t bytes) noexcept {
  object_row* row = find(id);
  if (row == nullptr) return;
  const auto recount = [&](int sign) {
    count(by_uid_[row->owner_uid], *row, sign);
    count(by_gid_[row->owner_gid], *row, sign);
    if (const auto maker = clients_.find(row->owner); maker != clients_.end()) {
      count(maker->second.owns, *row, sign);
    }
  };
  recount(-1);
  row->bytes = bytes;
  recount(+1);
  touch(id);
}

usage ledger::usage_of_uid(uid_t uid) const {
  const auto found = by_uid_.find(uid);
  return found == by_uid_.end() ? usage{} : found->second;
}

std::map<uid_t, usage> ledger::usage_by_uid() const {
  std::map<uid_t, usage> sorted;
  for (const auto& [uid, used] : by_uid_) {
    if (used != usage{}) sorted.emplace(uid, used);
  }
  return sorted;
}

usage ledger::usage_of_gid(gid_t gid) const {
  const auto found = by_gid_.find(gid);
  return found == by_gid_.end() ? usage{} : found->second;
}

std::optional<object_id> ledger::find_name(object_family family, std::string_view name) const {
  const auto& names = names_[index(family)];
  const auto found = names.find(name);
  if (found == names.end()) return std::nullopt;
  return found->second;
}

object_row* ledger::find(object_id id) noexcept {
  const auto found = places_.find(id);
  return found == places_.end() ? nullptr : &found->second.row->second;
}

const object_row* ledger::find(object_id id) const noexcept {
  const auto found = places_.find(id);
  return found == places_.end() ? nullptr : &found->second.row->second;
}

object_row& ledger::held(client_id client, object_id id, object_family family) {
  object_row* row = find(id);
  if (row == nullptr || family_of(row->kind) != family || !row->holders.contains(client)) {
    throw request_error(errc::not_found,
                        fmt::format("this client holds no {} {}", family_name(family), id));
  }
  return *row;
}

bool ledger::hold(object_id id, client_id client) {
  client_row& holder = clients_.at(client);
  auto [references, first] = places_.at(id).row->second.holders.try_emplace(client, 0);
  ++references->second;
  if (first) holder.holds.insert(id);
  touch(id);
  return first;
}

bool ledger::drop_reference(object_id id, client_id client) {
  object_row& row = places_.at(id).row->second;
  const auto references = row.holders.find(client);
  if (references == row.holders.end()) return true;
  touch(id);
  if (--references->second > 0) return false;
  row.holders.erase(references);
  if (row.owner == client) disown(row);
  if (const auto holder = clients_.find(client); holder != clients_.end()) {
    holder->second.holds.erase(id);
  }
  return true;
}

void ledger::erase(object_id id) noexcept {
  const auto found = places_.find(id);
  if (found == places_.end()) return;
  touch(id);
  const row_place where = found->second;
  object_row& row = where.row->second;
  const auto family = index(family_of(row.kind));
  auto& names = names_[family];
  if (const auto named = names.find(row.name); named != names.end() && named->second == id) {
    names.erase(named);
  }
  count(by_uid_[row.owner_uid], row, -1);
  count(by_gid_[row.owner_gid], row, -1);
  disown(row);
  // A row is erased when nobody holds it any more, but a book may erase it earlier (a failed
  // creation): the holders' sets must not keep its id.
  for (const auto& [holder, references] : row.holders) {
    if (const auto client = clients_.find(holder); client != clients_.end()) {
      client->second.holds.erase(id);
    }
  }
  places_.erase(found);
  ids_[family].erase(where.in_family);
  objects_.erase(where.row);
}

void ledger::add_holdings(holdings_by_family& into, client_id client, const client_row& row) const {
  for (const object_id id : row.holds) {
    const object_row& object = places_.at(id).row->second;
    holdings& family = into[family_of(object.kind)];
    if (object.owner == client) {
      ++family.owned;
      family.bytes_owned += object.bytes;
    } else {
      ++family.opened;
    }
  }
}

holdings_by_family ledger::holdings_of(client_id client) const {
  holdings_by_family result;
  add_holdings(result, client, this->client(client));
  return result;
}

holdings_by_family ledger::holdings_of_uid(uid_t uid) const {
  holdings_by_family result;
  for (const auto& [id, row] : clients_) {
    if (row.who.uid == uid) add_holdings(result, id, row);
  }
  return result;
}

}  // namespace gpumem::daemon
