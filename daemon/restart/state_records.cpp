#include "restart/state_records.hpp"

#include <fmt/format.h>

#include "restart/record_codec.hpp"

namespace gpumem::daemon::restart {

namespace {

void put_tenant(record_writer& out, const access_class& tenant) {
  out.put(tenant.owner);
  out.put(tenant.group.has_value());
  out.put(tenant.group.value_or(0));
  out.put(tenant.shared_bits);
}

access_class get_tenant(record_reader& in) {
  access_class tenant{};
  tenant.owner = in.get<uid_t>();
  const bool has_group = in.get_bool();
  const auto group = in.get<gid_t>();
  if (has_group) tenant.group = group;
  tenant.shared_bits = in.get<mode_t>();
  return tenant;
}

void put_meta(record_writer& out, const books& state) {
  out.put(state.instance);
  out.put(state.rows.next_object_id());
  out.put(state.rows.next_client_id());
  out.put(state.memory.pool_id_limit());
  out.put(next_chunk_id());
  const auto pending = state.sync.pending_reclaims();
  out.put(static_cast<std::uint32_t>(pending.size()));
  for (const auto& each : pending) {
    out.put(each.slot);
    out.put(each.id);
  }
  // Last, so that a daemon of an earlier version, which stops reading before it, still reads
  // the rest.
  out.put(state.events.last_sequence());
}

saved_meta get_meta(record_reader& in) {
  saved_meta meta;
  meta.instance = in.get<std::uint64_t>();
  meta.next_object = in.get<object_id>();
  meta.next_client = in.get<client_id>();
  meta.next_pool = in.get<std::uint32_t>();
  meta.next_chunk = in.get<std::uint64_t>();
  meta.pending.resize(in.get_count(2 + 8));
  for (auto& each : meta.pending) {
    each.slot = in.get<std::uint16_t>();
    each.id = in.get<object_id>();
  }
  // Absent from the state of a daemon of an earlier version.
  if (in.remaining() >= sizeof(std::uint64_t)) meta.event_sequence = in.get<std::uint64_t>();
  return meta;
}

void put_client(record_writer& out, const books& state, client_id id, const client_row& row) {
  out.put(row.who.pid);
  out.put(row.who.uid);
  out.put(row.who.gid);
  out.put(static_cast<std::uint32_t>(row.who.groups.size()));
  for (const gid_t each : row.who.groups) out.put(each);
  out.put_string(row.label);
  out.put(row.token.words[0]);
  out.put(row.token.words[1]);
  out.put(row.last_answered.request_id);
  out.put(row.last_answered.type);
  out.put_bytes(row.last_answered.reply);
  const auto attachment = state.sync.attachment_of(id);
  out.put(attachment.has_value());
  if (attachment) {
    out.put(attachment->slot);
    out.put(attachment->own_page);
  }
  // Last, so that a daemon of an earlier version, which stops reading before them, still reads
  // the rest. The monotonic clock is the machine's, shared by the daemon before and after.
  out.put(row.reported_pid);
  out.put(static_cast<std::int64_t>(row.connected.time_since_epoch().count()));
  out.put(row.streams_events);
}

saved_client get_client(record_reader& in) {
  saved_client client;
  credentials& who = client.row.who;
  who.pid = in.get<pid_t>();
  who.uid = in.get<uid_t>();
  who.gid = in.get<gid_t>();
  who.groups.resize(in.get_count(sizeof(gid_t)));
  for (gid_t& each : who.groups) each = in.get<gid_t>();
  client.row.label = in.get_string();
  client.row.token.words[0] = in.get<std::uint64_t>();
  client.row.token.words[1] = in.get<std::uint64_t>();
  client.row.last_answered.request_id = in.get<std::uint32_t>();
  client.row.last_answered.type = in.get<proto::message_type>();
  const auto reply = in.get_bytes();
  client.row.last_answered.reply.assign(reply.begin(), reply.end());
  client.row.connected = std::chrono::steady_clock::now();
  if (in.get_bool()) {
    auto& attachment = client.attachment.emplace();
    attachment.slot = in.get<std::uint16_t>();
    attachment.own_page = in.get<std::uint32_t>();
  }
  // Absent from the state of a daemon of an earlier version: then unknown, and connected now.
  if (in.remaining() >= sizeof(std::uint32_t) + sizeof(std::int64_t)) {
    client.row.reported_pid = in.get<std::uint32_t>();
    client.row.connected = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(in.get<std::int64_t>()));
  }
  if (in.remaining() >= sizeof(bool)) client.row.streams_events = in.get_bool();
  return client;
}

void put_chunk_ids(record_writer& out, std::uint64_t version, const reservation* chunks) {
  out.put(version);
  const std::size_t count = chunks != nullptr ? chunks->chunk_count() : 0;
  out.put(static_cast<std::uint32_t>(count));
  for (std::size_t index = 0; index < count; ++index) out.put(chunks->chunk_at(index).id);
}

saved_reservation::version_chunks get_chunk_ids(record_reader& in) {
  saved_reservation::version_chunks read;
  read.version = in.get<std::uint64_t>();
  read.chunks.resize(in.get_count(8));
  for (auto& chunk : read.chunks) chunk = in.get<std::uint64_t>();
  return read;
}

// A sleep or wake under way is written as where it started from: the copy it makes is not
// complete until it is done, and a restarted daemon starts from what is.
saved_reservation::phase saved_phase(const versioned_reservation& entry) {
  using phase = versioned_reservation::phase;
  switch (entry.current_phase()) {
    case phase::asleep:
    case phase::copying_in:
      return saved_reservation::phase::asleep;
    case phase::lost:
      return saved_reservation::phase::lost;
    default:
      return saved_reservation::phase::awake;
  }
}

void put_reservation(record_writer& out, const versioned_reservation& entry) {
  out.put(std::uint8_t{4});
  out.put(entry.device());
  out.put(entry.max_size());
  out.put(entry.chunk_size());
  const saved_reservation::phase phase = saved_phase(entry);
  out.put(phase);
  out.put(entry.committed());
  out.put(entry.attempt());
  put_chunk_ids(out, entry.version(),
                phase == saved_reservation::phase::awake ? entry.current_for_saving() : nullptr);
  out.put(static_cast<std::uint32_t>(entry.older().size()));
  for (const auto& [version, chunks] : entry.older()) put_chunk_ids(out, version, chunks.get());
  out.put(entry.draft_writer());
  if (entry.draft_writer() != 0) put_chunk_ids(out, entry.draft_version(), entry.draft_chunks());
  out.put(static_cast<std::uint32_t>(entry.mapped().size()));
  for (const auto& [holder, version] : entry.mapped()) {
    out.put(holder);
    out.put(version);
  }
  out.put(static_cast<std::uint32_t>(entry.writers().size()));
  for (const client_id writer : entry.writers()) out.put(writer);
  const bool copy_kept = phase == saved_reservation::phase::asleep && entry.host_copy() != nullptr;
  out.put(copy_kept);
  if (copy_kept) out.put(entry.host_copy()->made_at_attempt);
}

saved_reservation get_first_reservation(record_reader& in) {
  saved_reservation backing;
  backing.device = in.get<std::int32_t>();
  backing.max_size = in.get<std::uint64_t>();
  backing.chunk_size = in.get<std::uint64_t>();
  backing.current.version = 1;
  backing.current.chunks.resize(in.get_count(8));
  for (auto& chunk : backing.current.chunks) chunk = in.get<std::uint64_t>();
  backing.committed = backing.current.chunks.size() * backing.chunk_size;
  return backing;
}

saved_reservation get_reservation(record_reader& in) {
  saved_reservation backing;
  backing.notice_kept = true;
  backing.device = in.get<std::int32_t>();
  backing.max_size = in.get<std::uint64_t>();
  backing.chunk_size = in.get<std::uint64_t>();
  backing.state = in.get<saved_reservation::phase>();
  if (backing.state > saved_reservation::phase::lost) {
    throw format_error("a reservation in an unknown state");
  }
  backing.committed = in.get<std::uint64_t>();
  backing.attempt = in.get<std::uint64_t>();
  backing.current = get_chunk_ids(in);
  backing.older.resize(in.get_count(8 + 4));
  for (auto& older : backing.older) older = get_chunk_ids(in);
  backing.draft_writer = in.get<client_id>();
  if (backing.draft_writer != 0) backing.draft = get_chunk_ids(in);
  const std::size_t mapped = in.get_count(8 + 8);
  for (std::size_t each = 0; each < mapped; ++each) {
    const auto holder = in.get<client_id>();
    backing.mapped[holder] = in.get<std::uint64_t>();
  }
  backing.writers.resize(in.get_count(8));
  for (client_id& writer : backing.writers) writer = in.get<client_id>();
  if (in.get_bool()) {
    // Records before copies were named by the sleep that made them name it by the last one.
    backing.sleep_copy =
        in.remaining() >= sizeof(std::uint64_t) ? in.get<std::uint64_t>() : backing.attempt;
  }
  return backing;
}

void put_object(record_writer& out, const books& state, object_id id, const object_row& row) {
  out.put(row.kind);
  out.put_string(row.name);
  out.put(row.owner);
  out.put(row.owner_uid);
  out.put(row.owner_gid);
  out.put(row.mode);
  out.put(row.device);
  out.put(row.bytes);
  out.put(static_cast<std::uint32_t>(row.holders.size()));
  for (const auto& [holder, references] : row.holders) {
    out.put(holder);
    out.put(references);
  }
  if (const auto placed = state.memory.placement_of(id)) {
    const auto& [home, where] = *placed;
    out.put(std::uint8_t{1});
    out.put(home->id());
    out.put(where.offset);
    out.put(where.reserved_bytes);
    const grant_details grant = home->grant_of(where);
    out.put(grant.offset);
    out.put_bytes(grant.pointer_export);
  } else if (const versioned_reservation* entry = state.reservations.find(id)) {
    put_reservation(out, *entry);
  } else if (const auto cell = state.sync.cell_of(id)) {
    // A cell that is not broken keeps the older form, which a daemon of the version before
    // reads too.
    out.put(static_cast<std::uint8_t>(cell->broken ? 5 : 3));
    out.put(cell->page);
    out.put(cell->cell);
    out.put(cell->parties);
    for (const client_id party : cell->party_clients) out.put(party);
    out.put(cell->epoch);
    out.put(cell->corrupt);
    out.put(cell->kept);
    if (cell->broken) out.put(true);
    // Last, read when present: a daemon of the version before stops reading before it. Written
    // for every cell (zeros: none), so that a field appended later has a place of its own.
    out.put(cell->layout.slots);
    out.put(cell->layout.slot_bytes);
  } else {
    out.put(std::uint8_t{0});
  }
}

saved_object get_object(record_reader& in) {
  saved_object object;
  object_row& row = object.row;
  row.kind = in.get<object_kind>();
  if (row.kind > object_kind::channel) throw format_error("an object of an unknown kind");
  row.name = in.get_string();
  row.owner = in.get<client_id>();
  row.owner_uid = in.get<uid_t>();
  row.owner_gid = in.get<gid_t>();
  row.mode = in.get<mode_t>();
  row.device = in.get<std::int32_t>();
  row.bytes = in.get<std::uint64_t>();
  const std::size_t holders = in.get_count(8 + 4);
  for (std::size_t each = 0; each < holders; ++each) {
    const auto holder = in.get<client_id>();
    row.holders[holder] = in.get<std::uint32_t>();
  }
  const auto backing = in.get<std::uint8_t>();
  switch (backing) {
    case 1: {
      auto& allocation = object.allocation.emplace();
      allocation.pool = in.get<std::uint32_t>();
      allocation.where.offset = in.get<std::uint64_t>();
      allocation.where.reserved_bytes = in.get<std::uint64_t>();
      allocation.grant.offset = in.get<std::uint64_t>();
      const auto exported = in.get_bytes();
      if (exported.size() != allocation.grant.pointer_export.size()) {
        throw format_error("export data of the wrong size");
      }
      std::copy(exported.begin(), exported.end(), allocation.grant.pointer_export.begin());
      break;
    }
    case 2:  // the first format, before versions: one set of chunks
      object.reservation = get_first_reservation(in);
      break;
    case 4:
      object.reservation = get_reservation(in);
      break;
    case 3:  // a cell that is not broken
    case 5: {
      auto& cell = object.cell.emplace();
      cell.page = in.get<std::uint32_t>();
      cell.cell = in.get<std::uint32_t>();
      cell.parties = in.get<std::uint32_t>();
      if (cell.parties > in.remaining() / 8) throw format_error("more parties than bytes");
      cell.party_clients.resize(cell.parties);
      for (client_id& party : cell.party_clients) party = in.get<client_id>();
      cell.epoch = in.get<std::uint32_t>();
      cell.corrupt = in.get_bool();
      cell.kept = in.get_bool();
      if (backing == 5) cell.broken = in.get_bool();
      if (in.remaining() >= sizeof(std::uint32_t) + sizeof(std::uint64_t)) {
        cell.layout.slots = in.get<std::uint32_t>();
        cell.layout.slot_bytes = in.get<std::uint64_t>();
        // Only a channel has one; a half-given layout is taken for none.
        if (row.kind != object_kind::channel || cell.layout.slot_bytes == 0) cell.layout = {};
      }
      break;
    }
    case 0:
      break;
    default:
      throw format_error("an object with an unknown backing");
  }
  return object;
}

void put_pool(record_writer& out, const books& state, std::uint32_t id, const pool& instance) {
  const pool_config& config = instance.config();
  out.put_string(config.name);
  out.put(config.device);
  out.put(config.size);
  out.put(config.release_threshold);
  out.put(static_cast<std::uint32_t>(config.peer_access.size()));
  for (const std::int32_t peer : config.peer_access) out.put(peer);
  put_tenant(out, state.memory.tenant_of_pool(id));
}

saved_pool get_pool(record_reader& in) {
  saved_pool saved;
  saved.config.name = in.get_string();
  saved.config.device = in.get<std::int32_t>();
  saved.config.size = in.get<std::uint64_t>();
  saved.config.release_threshold = in.get<std::uint64_t>();
  saved.config.peer_access.resize(in.get_count(4));
  for (auto& peer : saved.config.peer_access) peer = in.get<std::int32_t>();
  saved.tenant = get_tenant(in);
  return saved;
}

void put_page(record_writer& out, const sync_page& page) {
  put_tenant(out, page.tenant());
  out.put(static_cast<std::uint32_t>(page.signal_pages().size()));
  for (const auto& [device, signal] : page.signal_pages()) out.put(device);
}

saved_page get_page(record_reader& in) {
  saved_page saved;
  saved.tenant = get_tenant(in);
  saved.signal_devices.resize(in.get_count(4));
  for (auto& device : saved.signal_devices) device = in.get<std::int32_t>();
  // Daemons built from bec06ca to 6b028e2 wrote dead clients' waiting lock turns after these.
  // They are not read: the turns' abandoned queue entries on the host page record them now.
  return saved;
}

template <class Id>
Id narrow_id(std::uint64_t id) {
  if (id > std::numeric_limits<Id>::max()) throw format_error("an id out of range");
  return static_cast<Id>(id);
}

}  // namespace

bool encode(const books& state, record_key key, record_writer& out) {
  switch (key.type) {
    case record_type::meta:
      put_meta(out, state);
      return true;
    case record_type::client: {
      const auto found = state.rows.clients().find(key.id);
      if (found == state.rows.clients().end()) return false;
      put_client(out, state, key.id, found->second);
      return true;
    }
    case record_type::object: {
      const object_row* row = state.rows.find(key.id);
      if (row == nullptr) return false;
      put_object(out, state, key.id, *row);
      return true;
    }
    case record_type::pool: {
      const pool* instance = state.memory.pool_by_id(static_cast<std::uint32_t>(key.id));
      if (instance == nullptr) return false;
      put_pool(out, state, static_cast<std::uint32_t>(key.id), *instance);
      return true;
    }
    case record_type::page: {
      const sync_page* page = state.sync.page_by_id(static_cast<std::uint32_t>(key.id));
      if (page == nullptr) return false;
      put_page(out, *page);
      return true;
    }
  }
  return false;
}

state_image decode(const record_map& records) {
  state_image image;
  for (const auto& [key, body] : records) {
    record_reader in(body);
    switch (key.type) {
      case record_type::meta:
        image.meta = get_meta(in);
        break;
      case record_type::client:
        image.clients.emplace(key.id, get_client(in));
        break;
      case record_type::object:
        image.objects.emplace(key.id, get_object(in));
        break;
      case record_type::pool:
        image.pools.emplace(narrow_id<std::uint32_t>(key.id), get_pool(in));
        break;
      case record_type::page:
        image.pages.emplace(narrow_id<std::uint32_t>(key.id), get_page(in));
        break;
      default:
        throw format_error(fmt::format("a record of unknown type {}", static_cast<int>(key.type)));
    }
  }
  return image;
}

std::string pool_fd_name(std::uint32_t pool_id) {
  return fmt::format("pool.{}", pool_id);
}
std::string chunk_fd_name(std::uint64_t chunk_id) {
  return fmt::format("chunk.{}", chunk_id);
}
std::string page_fd_name(std::uint32_t page_id) {
  return fmt::format("page.{}", page_id);
}
std::string signal_fd_name(std::uint32_t page_id, std::int32_t device) {
  return fmt::format("signal.{}.{}", page_id, device);
}
std::string client_fd_name(client_id client) {
  return fmt::format("client.{}", client);
}
std::string notice_fd_name(object_id reservation) {
  return fmt::format("notice.{}", reservation);
}
std::string sleep_copy_fd_name(object_id reservation, std::uint64_t attempt) {
  return fmt::format("asleep.{}.{}", reservation, attempt);
}

std::vector<std::pair<std::string, int>> descriptors_of(const books& state, record_key key) {
  std::vector<std::pair<std::string, int>> named;
  switch (key.type) {
    case record_type::pool:
      if (const pool* found = state.memory.pool_by_id(static_cast<std::uint32_t>(key.id))) {
        named.emplace_back(pool_fd_name(found->id()), found->shareable_fd());
      }
      break;
    case record_type::page:
      if (const sync_page* page = state.sync.page_by_id(static_cast<std::uint32_t>(key.id))) {
        named.emplace_back(page_fd_name(page->id()), page->fd());
        for (const auto& [device, signal] : page->signal_pages()) {
          named.emplace_back(signal_fd_name(page->id(), device), signal->fd());
        }
      }
      break;
    case record_type::object:
      if (const versioned_reservation* entry = state.reservations.find(key.id)) {
        named.emplace_back(notice_fd_name(key.id), entry->notice().fd());
        const auto add_chunks = [&](const reservation* chunks) {
          if (chunks == nullptr) return;
          for (std::size_t index = 0; index < chunks->chunk_count(); ++index) {
            const reservation::chunk each = chunks->chunk_at(index);
            named.emplace_back(chunk_fd_name(each.id), each.fd);
          }
        };
        const saved_reservation::phase phase = saved_phase(*entry);
        if (phase == saved_reservation::phase::awake) add_chunks(entry->current_for_saving());
        for (const auto& [version, chunks] : entry->older()) add_chunks(chunks.get());
        add_chunks(entry->draft_chunks());
        if (phase == saved_reservation::phase::asleep && entry->host_copy() != nullptr) {
          named.emplace_back(sleep_copy_fd_name(key.id, entry->host_copy()->made_at_attempt),
                             entry->host_copy()->memory.get());
        }
      }
      break;
    default:
      break;
  }
  return named;
}

}  // namespace gpumem::daemon::restart
