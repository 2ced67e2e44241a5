#include "top.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

namespace gpumemctl {

namespace {

double seconds_between(const snapshot& before, const snapshot& now) {
  return std::chrono::duration<double>(now.taken - before.taken).count();
}

/// Signed change per second of a counter that can go down as well as up.
double per_second(std::uint64_t before, std::uint64_t now, double seconds) {
  return (static_cast<double>(now) - static_cast<double>(before)) / seconds;
}

snapshot look(gpumem::Client& client) {
  snapshot taken{client.stats(), client.clients(), {}};
  taken.taken = std::chrono::steady_clock::now();
  return taken;
}

}  // namespace

std::vector<pool_activity> pool_activities(const snapshot& now, const snapshot* before) {
  std::map<std::uint32_t, const gpumem::PoolStats*> earlier;
  if (before != nullptr) {
    for (const auto& pool : before->stats.pools) earlier.emplace(pool.id, &pool);
  }
  std::vector<pool_activity> activities;
  for (const auto& pool : now.stats.pools) {
    pool_activity activity{pool, {}};
    if (const auto found = earlier.find(pool.id); found != earlier.end()) {
      const double seconds = seconds_between(*before, now);
      activity.change = {per_second(found->second->allocations, pool.allocations, seconds),
                         per_second(found->second->bytes_in_use, pool.bytes_in_use, seconds)};
    }
    activities.push_back(std::move(activity));
  }
  return activities;
}

std::vector<client_activity> client_activities(const snapshot& now, const snapshot* before) {
  std::map<std::uint64_t, const gpumem::ClientInfo*> earlier;
  if (before != nullptr) {
    for (const auto& client : before->clients) earlier.emplace(client.id, &client);
  }
  std::vector<client_activity> activities;
  for (const auto& client : now.clients) {
    client_activity activity{client, {}};
    if (const auto found = earlier.find(client.id); found != earlier.end()) {
      const double seconds = seconds_between(*before, now);
      activity.change = {
          per_second(found->second->allocations_owned, client.allocations_owned, seconds),
          per_second(found->second->bytes_owned, client.bytes_owned, seconds)};
    }
    activities.push_back(std::move(activity));
  }
  return activities;
}

std::string count_rate_text(double per_second) {
  if (per_second == 0) return "0";
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f", per_second);
  return text;
}

std::string bytes_rate_text(double per_second) {
  const auto magnitude = static_cast<std::uint64_t>(std::llround(std::fabs(per_second)));
  const char* sign = magnitude == 0 ? "" : per_second < 0 ? "-" : "+";
  return sign + bytes_text(magnitude) + "/s";
}

void top_view::print(gpumem::Client& client, bool as_json) {
  const snapshot now = look(client);
  const snapshot* before = previous_ ? &*previous_ : nullptr;
  const auto pools = pool_activities(now, before);
  const auto clients = client_activities(now, before);
  if (as_json) {
    std::cout << json{{"daemon_pid", now.stats.daemon_pid},
                      {"uptime_ms", now.stats.uptime_ms},
                      {"pools", records_json(pools, kPoolActivityFields)},
                      {"clients", records_json(clients, kClientActivityFields)}}
                     .dump(2)
              << '\n';
  } else {
    std::cout << "gpumemd pid " << now.stats.daemon_pid << ", up "
              << duration_text(now.stats.uptime_ms) << ": " << now.stats.pools.size()
              << " pool(s), " << now.stats.clients << " client(s), " << now.stats.allocations
              << " allocation(s)\n\n";
    // Every column stays, rates included before they are known: the view keeps its shape.
    records_table(pools, headed<pool_activity>(kPoolActivityFields), empty_columns::keep)
        .print(std::cout);
    std::cout << '\n';
    records_table(clients, headed<client_activity>(kClientActivityFields), empty_columns::keep)
        .print(std::cout);
  }
  previous_ = now;
}

}  // namespace gpumemctl
