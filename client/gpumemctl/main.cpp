// gpumemctl: inspect a running gpumemd. Links only libgpumem: everything goes over the socket.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "table.hpp"

namespace {

using nlohmann::json;

std::string device_name(int device) {
  return device == gpumem::kHost ? "host" : "cuda:" + std::to_string(device);
}

json pools_json(const gpumem::Stats& stats) {
  json pools = json::array();
  for (const auto& p : stats.pools) {
    pools.push_back({{"name", p.name},
                     {"id", p.id},
                     {"device", device_name(p.device)},
                     {"size_limit", p.size_limit},
                     {"bytes_in_use", p.bytes_in_use},
                     {"bytes_reserved", p.bytes_reserved},
                     {"bytes_in_use_high", p.bytes_in_use_high},
                     {"allocations", p.allocations},
                     {"driver_reserved_current", p.driver_reserved_current},
                     {"driver_reserved_high", p.driver_reserved_high},
                     {"driver_used_current", p.driver_used_current},
                     {"driver_used_high", p.driver_used_high}});
  }
  return pools;
}

void print_json(const json& document) {
  std::cout << document.dump(2) << '\n';
}

void status(gpumem::Client& client, bool as_json) {
  const auto stats = client.stats();
  const json document{{"daemon_pid", stats.daemon_pid},
                      {"socket", client.socket_path()},
                      {"uptime_ms", stats.uptime_ms},
                      {"cuda", stats.cuda},
                      {"mps", stats.mps},
                      {"pools", stats.pools.size()},
                      {"clients", stats.clients},
                      {"allocations", stats.allocations}};
  if (as_json) return print_json(document);
  gpumemctl::table rows({"", ""});
  rows.add({"daemon pid", std::to_string(stats.daemon_pid)});
  rows.add({"socket", client.socket_path()});
  rows.add({"uptime", gpumemctl::duration_text(stats.uptime_ms)});
  rows.add({"cuda backend", stats.cuda ? "yes" : "no"});
  rows.add({"mps", stats.cuda ? (stats.mps ? "active" : "not active") : "-"});
  rows.add({"ipc events live", std::to_string(stats.ipc_events_live)});
  rows.add({"pools", std::to_string(stats.pools.size())});
  rows.add({"clients", std::to_string(stats.clients)});
  rows.add({"allocations", std::to_string(stats.allocations)});
  rows.print(std::cout, false);
}

void stats(gpumem::Client& client, bool as_json) {
  const auto stats = client.stats();
  if (as_json) return print_json({{"pools", pools_json(stats)}, {"clients", stats.clients}});
  // The daemon's books first, then what the driver says of the same pool (CUDA pools only).
  gpumemctl::table rows({"POOL", "DEVICE", "IN USE", "RESERVED", "HIGH", "LIMIT", "ALLOCATIONS",
                         "DRIVER USED", "DRIVER RESERVED", "DRIVER HIGH"});
  for (const auto& p : stats.pools) {
    const bool cuda = p.device != gpumem::kHost;
    rows.add({p.name, device_name(p.device), gpumemctl::bytes_text(p.bytes_in_use),
              gpumemctl::bytes_text(p.bytes_reserved), gpumemctl::bytes_text(p.bytes_in_use_high),
              gpumemctl::bytes_text(p.size_limit), std::to_string(p.allocations),
              cuda ? gpumemctl::bytes_text(p.driver_used_current) : "-",
              cuda ? gpumemctl::bytes_text(p.driver_reserved_current) : "-",
              cuda ? gpumemctl::bytes_text(p.driver_reserved_high) : "-"});
  }
  rows.print(std::cout);
  std::cout << stats.clients << " client(s)\n";
}

void pools(gpumem::Client& client, bool as_json) {
  const auto stats = client.stats();
  if (as_json) return print_json(pools_json(stats));
  gpumemctl::table rows({"ID", "POOL", "DEVICE", "LIMIT", "IN USE", "RESERVED", "ALLOCATIONS"});
  for (const auto& p : stats.pools) {
    rows.add({std::to_string(p.id), p.name, device_name(p.device),
              gpumemctl::bytes_text(p.size_limit), gpumemctl::bytes_text(p.bytes_in_use),
              gpumemctl::bytes_text(p.bytes_reserved), std::to_string(p.allocations)});
  }
  rows.print(std::cout);
}

void clients(gpumem::Client& client, bool as_json) {
  const auto all = client.clients();
  if (as_json) {
    json list = json::array();
    for (const auto& c : all) {
      list.push_back({{"id", c.id},
                      {"pid", c.pid},
                      {"uid", c.uid},
                      {"gid", c.gid},
                      {"label", c.label},
                      {"allocations_owned", c.allocations_owned},
                      {"allocations_opened", c.allocations_opened},
                      {"bytes_owned", c.bytes_owned},
                      {"connected_ms", c.connected_ms},
                      {"self", c.id == client.id()}});
    }
    return print_json(list);
  }
  gpumemctl::table rows(
      {"ID", "PID", "UID", "LABEL", "OWNED", "OPENED", "BYTES OWNED", "CONNECTED"});
  for (const auto& c : all) {
    rows.add({std::to_string(c.id) + (c.id == client.id() ? "*" : ""), std::to_string(c.pid),
              std::to_string(c.uid), c.label, std::to_string(c.allocations_owned),
              std::to_string(c.allocations_opened), gpumemctl::bytes_text(c.bytes_owned),
              gpumemctl::duration_text(c.connected_ms)});
  }
  rows.print(std::cout);
  std::cout << "(* this gpumemctl)\n";
}

void allocations(gpumem::Client& client, bool as_json) {
  const auto all = client.allocations();
  if (as_json) {
    json list = json::array();
    for (const auto& a : all) {
      list.push_back({{"id", a.id},
                      {"name", a.name},
                      {"size", a.size},
                      {"pool", a.pool},
                      {"owner_client", a.owner_client},
                      {"holders", a.holders}});
    }
    return print_json(list);
  }
  gpumemctl::table rows({"ID", "NAME", "SIZE", "POOL", "OWNER", "HOLDERS"});
  for (const auto& a : all) {
    rows.add({std::to_string(a.id), a.name.empty() ? "-" : a.name, gpumemctl::bytes_text(a.size),
              std::to_string(a.pool), a.owner_client ? std::to_string(a.owner_client) : "(gone)",
              std::to_string(a.holders)});
  }
  rows.print(std::cout);
}

void reservations(gpumem::Client& client, bool as_json) {
  const auto all = client.reservations();
  if (as_json) {
    json list = json::array();
    for (const auto& r : all) {
      list.push_back({{"id", r.id},
                      {"name", r.name},
                      {"device", device_name(r.device)},
                      {"max_size", r.max_size},
                      {"committed", r.committed},
                      {"owner_client", r.owner_client},
                      {"holders", r.holders}});
    }
    return print_json(list);
  }
  gpumemctl::table rows({"ID", "NAME", "DEVICE", "COMMITTED", "MAX", "OWNER", "HOLDERS"});
  for (const auto& r : all) {
    rows.add({std::to_string(r.id), r.name.empty() ? "-" : r.name, device_name(r.device),
              gpumemctl::bytes_text(r.committed), gpumemctl::bytes_text(r.max_size),
              r.owner_client ? std::to_string(r.owner_client) : "(gone)",
              std::to_string(r.holders)});
  }
  rows.print(std::cout);
}

const char* kind_name(gpumem::SyncKind kind) {
  switch (kind) {
    case gpumem::SyncKind::lock:
      return "lock";
    case gpumem::SyncKind::barrier:
      return "barrier";
    case gpumem::SyncKind::channel:
      return "channel";
  }
  return "?";
}

std::string sync_state(const gpumem::SyncInfo& s) {
  if (s.not_recoverable) return "not recoverable";
  if (s.owner_died) return "owner died";
  if (s.broken) return "broken";
  if (s.kind == gpumem::SyncKind::lock) return s.owner_pid != 0 ? "held" : "free";
  return "ok";
}

void locks(gpumem::Client& client, bool as_json) {
  const auto all = client.sync_objects();
  if (as_json) {
    json list = json::array();
    for (const auto& s : all) {
      list.push_back({{"id", s.id},
                      {"kind", kind_name(s.kind)},
                      {"name", s.name},
                      {"domain", s.domain},
                      {"state", sync_state(s)},
                      {"owner_pid", s.owner_pid},
                      {"queued", s.queued},
                      {"parties", s.parties},
                      {"attached", s.attached},
                      {"owner_deaths", s.owner_deaths},
                      {"epoch", s.epoch}});
    }
    return print_json(list);
  }
  gpumemctl::table rows(
      {"ID", "KIND", "NAME", "DOMAIN", "STATE", "OWNER", "QUEUED", "PARTIES", "OPEN", "DEATHS"});
  for (const auto& s : all) {
    const bool lock = s.kind == gpumem::SyncKind::lock;
    rows.add({std::to_string(s.id), kind_name(s.kind), s.name, s.domain, sync_state(s),
              s.owner_pid != 0 ? std::to_string(s.owner_pid) : "-",
              lock ? std::to_string(s.queued) : "-", lock ? "-" : std::to_string(s.parties),
              std::to_string(s.attached), std::to_string(s.owner_deaths)});
  }
  rows.print(std::cout);
}

void ping(gpumem::Client& client, bool as_json) {
  client.ping();
  if (as_json) return print_json({{"ok", true}});
  std::cout << "gpumemd at " << client.socket_path() << " answered\n";
}

struct command {
  const char* name;
  const char* summary;
  void (*run)(gpumem::Client&, bool as_json);
};

constexpr command kCommands[] = {
    {"status", "daemon pid, uptime, backends and counts", status},
    {"stats", "pool usage and client count", stats},
    {"pools", "configured pools and their usage", pools},
    {"clients", "connected clients and what they hold", clients},
    {"allocations", "live allocations, names and holders", allocations},
    {"reservations", "VMM reservations, committed sizes and holders", reservations},
    {"locks", "locks, barriers and channels: state, holder, waiters, deaths", locks},
    {"ping", "check that the daemon answers", ping},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpumemctl: inspect a running gpumemd"};
  app.require_subcommand(1);
  std::string socket_path;
  bool as_json = false;
  app.add_option("-s,--socket", socket_path, "daemon socket (default: $GPUMEM_SOCKET, ...)");
  app.add_flag("--json", as_json, "print JSON instead of a table");
  const command* chosen = nullptr;
  for (const auto& each : kCommands) {
    auto* sub = app.add_subcommand(each.name, each.summary);
    sub->add_flag("--json", as_json, "print JSON instead of a table");
    sub->callback([&chosen, &each] { chosen = &each; });
  }
  std::string reset_name;
  std::uint32_t reset_parties = 0;
  auto* reset = app.add_subcommand(
      "reset", "make a lock usable again (releasing its holder) or restart a barrier or channel");
  reset->add_option("name", reset_name, "the lock, barrier or channel")->required();
  reset->add_option("--parties", reset_parties,
                    "barriers and channels: parties from now on (default: those attached)");
  CLI11_PARSE(app, argc, argv);
  try {
    auto client = gpumem::Client::connect({.socket_path = socket_path, .label = "gpumemctl"});
    if (reset->parsed()) {
      client.reset(reset_name, reset_parties);
      if (as_json) {
        print_json({{"reset", reset_name}});
      } else {
        std::cout << "reset " << reset_name << '\n';
      }
      return 0;
    }
    chosen->run(client, as_json);
    return 0;
  } catch (const gpumem::Error& error) {
    std::fprintf(stderr, "gpumemctl: %s\n", error.what());
    return 1;
  }
}
