#include "metrics/collect.hpp"

#include <algorithm>
#include <array>
#include <deque>
#include <iterator>
#include <map>
#include <string>

#include "gpumem/proto/errc.hpp"

namespace gpumem::daemon::metrics {

namespace {

constexpr const char* kErrcNames[] = {
#define GPUMEM_X(name, value, text) #name,
    GPUMEM_ERRC_TABLE(GPUMEM_X)
#undef GPUMEM_X
};

constexpr const char* kKindNames[] = {"allocation", "reservation", "lock", "barrier", "channel"};
static_assert(std::size(kKindNames) == static_cast<std::size_t>(object_kind::channel) + 1);

std::string device_label(std::int32_t device) {
  return device == proto::kHostDevice ? "host" : "cuda" + std::to_string(device);
}

/// Families in the order added. A deque: a family added stays where it is while its samples are
/// filled in beside later ones.
class builder {
 public:
  family& add(std::string name, std::string help, metric_type type = metric_type::gauge) {
    families_.push_back({std::move(name), std::move(help), type, {}, {}});
    return families_.back();
  }
  void one(std::string name, std::string help, std::uint64_t value,
           metric_type type = metric_type::gauge) {
    add(std::move(name), std::move(help), type).samples.push_back({{}, value});
  }
  snapshot take() {
    return {std::make_move_iterator(families_.begin()), std::make_move_iterator(families_.end())};
  }

 private:
  std::deque<family> families_;
};

/// What one uid or label owns, with its connections (uid) or clients (label).
using tally = usage;

std::uint64_t bytes_of(const tally& owned) {
  return owned.host_bytes + owned.device_bytes;
}

void add_to(tally& into, const tally& more) {
  into.host_bytes += more.host_bytes;
  into.device_bytes += more.device_bytes;
  into.memory_objects += more.memory_objects;
  into.sync_objects += more.sync_objects;
  into.connections += more.connections;
}

/// The @p cap keys owning the most, by name; the rest summed under "other".
std::vector<std::pair<std::string, tally>> fold(std::map<std::string, tally> all, std::size_t cap) {
  std::vector<std::pair<std::string, tally>> ranked(all.begin(), all.end());
  if (ranked.size() <= cap) return ranked;
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    if (bytes_of(a.second) != bytes_of(b.second)) return bytes_of(a.second) > bytes_of(b.second);
    return a.second.connections > b.second.connections;
  });
  tally other;
  for (auto each = ranked.begin() + static_cast<std::ptrdiff_t>(cap); each != ranked.end();
       ++each) {
    add_to(other, each->second);
  }
  ranked.resize(cap);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  ranked.emplace_back("other", other);
  return ranked;
}

/// gpumemd_<what>_<count_name> and what each key owns: _owned_bytes by memory kind (host or
/// gpu) and _owned_objects by kind (memory: allocations and reservations; sync: locks,
/// barriers, channels). @p objects says which objects count for a key.
void owned_families(builder& out, const std::string& what, const char* count_name,
                    const char* count_help,
                    const std::vector<std::pair<std::string, tally>>& tallies,
                    const std::string& objects) {
  family& counted = out.add("gpumemd_" + what + "_" + count_name, count_help);
  family& bytes =
      out.add("gpumemd_" + what + "_owned_bytes", "Memory of " + objects + ", host or gpu");
  family& owned_objects =
      out.add("gpumemd_" + what + "_owned_objects",
              "Count of " + objects +
                  ": memory (allocations, reservations) or sync (locks, barriers, channels)");
  for (const auto& [key, owned] : tallies) {
    counted.samples.push_back({{{what, key}}, owned.connections});
    bytes.samples.push_back({{{what, key}, {"memory", "host"}}, owned.host_bytes});
    bytes.samples.push_back({{{what, key}, {"memory", "gpu"}}, owned.device_bytes});
    owned_objects.samples.push_back({{{what, key}, {"kind", "memory"}}, owned.memory_objects});
    owned_objects.samples.push_back({{{what, key}, {"kind", "sync"}}, owned.sync_objects});
  }
}

void pools(builder& out, const books& state) {
  const proto::stats_reply stats = state.memory.stats();
  family& size =
      out.add("gpumemd_pool_size_bytes", "Capacity of a host pool, the most a CUDA pool may hold");
  family& used = out.add("gpumemd_pool_used_bytes", "Bytes of the pool's live allocations");
  family& reserved = out.add("gpumemd_pool_reserved_bytes",
                             "Backing memory the pool holds, rounding and free blocks included");
  family& allocations = out.add("gpumemd_pool_allocations", "Live allocations of the pool");
  for (const proto::pool_stats& pool : stats.records) {
    const label_set labels{{"pool", std::string(pool.name.view())},
                           {"device", device_label(pool.device)}};
    size.samples.push_back({labels, pool.size_limit});
    used.samples.push_back({labels, pool.bytes_in_use});
    reserved.samples.push_back({labels, pool.bytes_reserved});
    allocations.samples.push_back({labels, pool.allocations});
  }
  family& spare_bytes = out.add("gpumemd_pool_spare_bytes",
                                "Device memory a CUDA pool's instances hold, or are making, in "
                                "blocks kept ahead of demand (within its size)");
  family& spare_ready = out.add("gpumemd_pool_spare_ready_bytes",
                                "Of gpumemd_pool_spare_bytes, the blocks ready to serve an "
                                "allocation (the rest is being made)");
  family& spare_allocations =
      out.add("gpumemd_pool_cuda_allocations_total",
              "CUDA allocations given a spare block (from=\"spare\") or a block made on the "
              "request path (from=\"request\")",
              metric_type::counter);
  family& spare_blocks =
      out.add("gpumemd_pool_spare_blocks_total",
              "Blocks that became spares of a CUDA pool: made by its worker (how=\"made\", each a "
              "driver allocation and pointer export), or released blocks kept once their holders "
              "were done (how=\"reused\", neither)",
              metric_type::counter);
  for (const auto& [config, use] : state.memory.spares()) {
    if (config->device == proto::kHostDevice) continue;
    const label_set labels{{"pool", config->name}, {"device", device_label(config->device)}};
    spare_bytes.samples.push_back({labels, use.bytes});
    spare_ready.samples.push_back({labels, use.ready_bytes});
    label_set spare = labels;
    spare.push_back({"from", "spare"});
    spare_allocations.samples.push_back({spare, use.served});
    label_set made = labels;
    made.push_back({"from", "request"});
    spare_allocations.samples.push_back({made, use.missed});
    for (const auto& [how, count] :
         {std::pair{"made", use.made}, std::pair{"reused", use.reused}}) {
      label_set origin = labels;
      origin.push_back({"how", how});
      spare_blocks.samples.push_back({origin, count});
    }
  }
  out.one("gpumemd_sleep_memory_kept_bytes",
          "Host memory woken reservations keep, pages made and pinned, for their next sleep "
          "(at most sleep_memory_kept)",
          state.reservations.sleep_memory_kept());
}

void clients_and_objects(builder& out, const books& state, const audience& who) {
  out.one("gpumemd_clients",
          "Clients the daemon knows: connected, or disconnected while their process still "
          "holds GPU memory or locks",
          state.rows.clients().size());
  std::array<std::uint64_t, std::size(kKindNames)> by_kind{};
  for (const auto& [id, row] : state.rows.objects()) ++by_kind[static_cast<std::size_t>(row.kind)];
  family& objects = out.add("gpumemd_objects", "Live objects by kind");
  for (std::size_t kind = 0; kind < by_kind.size(); ++kind) {
    objects.samples.push_back({{{"kind", kKindNames[kind]}}, by_kind[kind]});
  }

  std::map<std::string, tally> uids;
  for (const auto& [uid, used] : state.rows.usage_by_uid()) {
    if (who.every_uid || uid == who.uid) uids[std::to_string(uid)] = used;
  }
  owned_families(out, "uid", "connections", "Connections of the uid", fold(uids, kMaxUidSeries),
                 "the objects whose owner uid it is, whoever holds them");

  std::map<std::string, tally> labels;
  for (const auto& [id, row] : state.rows.clients()) {
    if (!who.every_uid && row.who.uid != who.uid) continue;
    tally& label = labels[row.label];
    add_to(label, row.owns);
    ++label.connections;
  }
  owned_families(out, "label", "clients", "Clients with the label (the label a client gave)",
                 fold(labels, kMaxLabelSeries),
                 "the objects that clients with the label made and still hold");
}

void activity(builder& out, const books& state) {
  const activity_counters& counted = state.activity;
  out.one("gpumemd_connections_total", "Sessions opened (hellos accepted), resumed ones included",
          counted.connections, metric_type::counter);
  family& departures =
      out.add("gpumemd_departures_total",
              "Clients gone: died (the process ended without closing) or disconnected (closed)",
              metric_type::counter);
  departures.samples.push_back({{{"how", "died"}}, counted.died});
  departures.samples.push_back({{{"how", "disconnected"}}, counted.disconnected});
  out.one("gpumemd_lock_owner_deaths_total",
          "Locks whose holder died holding them; the next holder was told the owner died",
          counted.owner_deaths, metric_type::counter);
  out.one("gpumemd_reclaimed_bytes_total",
          "Memory departed clients owned, taken back from them (freed, or left to other holders)",
          counted.reclaimed_bytes, metric_type::counter);
  out.one("gpumemd_reclaimed_objects_total", "Objects departed clients owned, taken back from them",
          counted.reclaimed_objects, metric_type::counter);
}

void requests(builder& out, const books& state) {
  family& latency = out.add("gpumemd_request_duration_seconds",
                            "Time from a request's arrival to its reply being queued, by "
                            "message type; _count is the requests answered",
                            metric_type::histogram);
  for (std::size_t slot = 0; slot <= std::size(proto::kMessages); ++slot) {
    const latency_histogram& counted = state.requests.of_slot(slot);
    if (counted.count == 0) continue;
    histogram_sample made;
    made.labels = {{"type", slot == 0 ? "unknown" : proto::kMessages[slot - 1].name}};
    std::uint64_t cumulative = 0;
    for (std::size_t bound = 0; bound < kLatencyBounds; ++bound) {
      cumulative += counted.buckets[bound];
      // Divided, not scaled: the double nearest 2^k microseconds prints as its decimal.
      made.buckets.emplace_back(static_cast<double>(std::uint64_t{1} << bound) / 1e6, cumulative);
    }
    made.count = counted.count;
    made.sum = static_cast<double>(counted.sum_ns) / 1e9;
    latency.histograms.push_back(std::move(made));
  }
  family& errors =
      out.add("gpumemd_request_errors_total", "Error replies by code", metric_type::counter);
  for (std::size_t code = 1; code < std::size(kErrcNames); ++code) {
    if (const std::uint64_t count = state.requests.errors(static_cast<proto::errc>(code))) {
      errors.samples.push_back({{{"code", kErrcNames[code]}}, count});
    }
  }
}

}  // namespace

snapshot collect(const books& state, const audience& who) {
  builder out;
  out.one("gpumemd_start_time_seconds", "When this gpumemd started, in seconds since the epoch",
          static_cast<std::uint64_t>(
              std::chrono::duration_cast<std::chrono::seconds>(state.started_at.time_since_epoch())
                  .count()));
  out.one("gpumemd_state_kept",
          "1 while a restart finds what clients were told: systemd keeps the state and its last "
          "write succeeded",
          state.state_kept() ? 1 : 0);
  out.one("gpumemd_state_write_failures_total",
          "Writes of the state for a restart that failed; until one succeeds, gpumemd_state_kept "
          "is 0",
          state.state_write_failures(), metric_type::counter);
  out.one("gpumemd_state_descriptors",
          "Descriptors gpumemd asked systemd to keep for a restart; systemd drops those past the "
          "unit's FileDescriptorStoreMax without a word, and what they held is lost at a restart",
          state.state_descriptors());
  out.one("gpumemd_readopted_clients",
          "Clients this gpumemd took over at start from the gpumemd before it",
          state.readopted_clients);
  pools(out, state);
  clients_and_objects(out, state, who);
  activity(out, state);
  requests(out, state);
  out.one("gpumemd_event_subscribers", "Sessions streaming events (gpumemctl events)",
          state.events.subscribers());
  out.one("gpumemd_events_lost_total",
          "Events dropped for subscribers that read too slowly (each was told how many)",
          state.events.lost(), metric_type::counter);
  return out.take();
}

}  // namespace gpumem::daemon::metrics
