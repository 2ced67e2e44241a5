// gpumemctl: inspect a running gpumemd. Links only libgpumem: everything goes over the socket.
//
// client/gpumemctl/ holds the tool: this file (subcommands and options), records.hpp (each
// record's fields, described once for both the table and the JSON), field.hpp (how a field
// description prints) and table.hpp (aligned columns). It may include the public client
// headers only, never client/src, proto/ internals or daemon/.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"
#include "live.hpp"
#include "records.hpp"

namespace {

using gpumemctl::json;

void print_json(const json& document) {
  std::cout << document.dump(2) << '\n';
}

template <class Record>
void print_records(const std::vector<Record>& records,
                   std::type_identity_t<gpumemctl::fields_of<Record>> fields, bool as_json) {
  if (as_json) return print_json(gpumemctl::records_json(records, fields));
  gpumemctl::records_table(records, gpumemctl::headed(fields)).print(std::cout);
}

void status(gpumem::Client& client, bool as_json) {
  const gpumemctl::daemon_status status{client.stats(), client.socket_path()};
  if (as_json) return print_json(gpumemctl::record_json(status, gpumemctl::kStatusFields));
  gpumemctl::record_rows(status, gpumemctl::kStatusFields).print(std::cout, false);
}

void stats(gpumem::Client& client, bool as_json) {
  const auto stats = client.stats();
  if (as_json) {
    return print_json({{"pools", gpumemctl::records_json(stats.pools, gpumemctl::kPoolFields)},
                       {"clients", stats.clients}});
  }
  gpumemctl::records_table(stats.pools, gpumemctl::kStatsColumns).print(std::cout);
  std::cout << stats.clients << " client(s)\n";
}

void pools(gpumem::Client& client, bool as_json) {
  const auto stats = client.stats();
  if (as_json) return print_json(gpumemctl::records_json(stats.pools, gpumemctl::kPoolFields));
  gpumemctl::records_table(stats.pools, gpumemctl::kPoolsColumns).print(std::cout);
}

void clients(gpumem::Client& client, bool as_json) {
  std::vector<gpumemctl::listed_client> all;
  for (const auto& each : client.clients()) all.push_back({each, each.id == client.id()});
  print_records(all, gpumemctl::kClientFields, as_json);
  if (!as_json) std::cout << "(* this gpumemctl)\n";
}

void allocations(gpumem::Client& client, bool as_json) {
  print_records(client.allocations(), gpumemctl::kAllocationFields, as_json);
}

void reservations(gpumem::Client& client, bool as_json) {
  print_records(client.reservations(), gpumemctl::kReservationFields, as_json);
}

void locks(gpumem::Client& client, bool as_json) {
  print_records(client.sync_objects(), gpumemctl::kSyncFields, as_json);
}

void quotas(gpumem::Client& client, bool as_json) {
  print_records(client.usage(), gpumemctl::kUsageFields, as_json);
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
    {"reservations",
     "reservations: state, versions, committed sizes, holders per version, host bytes asleep",
     reservations},
    {"locks", "locks, barriers and channels: state, holder, waiters, deaths", locks},
    {"quotas", "use against quota per uid (yours; every uid's for an administrator)", quotas},
    {"ping", "check that the daemon answers", ping},
    {"metrics", "Prometheus text for node_exporter's textfile collector", gpumemctl::metrics},
    {"events", "stream connects, deaths, reclaims, owner deaths, refusals", gpumemctl::events},
};

struct reset_args {
  std::string name;
  std::uint32_t parties = 0;
};

void reset(gpumem::Client& client, const reset_args& args, bool as_json) {
  client.reset(args.name, args.parties);
  if (as_json) return print_json({{"reset", args.name}});
  std::cout << "reset " << args.name << '\n';
}

/// Where reservation @p name is now: in full (reservation-status), or in the one line that
/// sleep and wake end with.
void print_reservation(gpumem::Client& client, const std::string& name, bool as_json,
                       bool in_full) {
  const gpumemctl::named_reservation_status status{gpumem::reservation_status(client, name), name};
  if (as_json) {
    return print_json(gpumemctl::record_json(status, gpumemctl::kReservationStatusFields));
  }
  if (!in_full) {
    std::cout << gpumemctl::reservation_outcome(status) << '\n';
    return;
  }
  gpumemctl::record_rows(status, gpumemctl::kReservationStatusFields).print(std::cout, false);
}

struct sleep_args {
  std::string name;
  bool discard = false;
  std::uint32_t deadline_ms = 0;
};

void sleep_named(gpumem::Client& client, const sleep_args& args, bool as_json) {
  gpumem::sleep_reservation(
      client, args.name,
      {.discard = args.discard, .deadline = std::chrono::milliseconds(args.deadline_ms)});
  print_reservation(client, args.name, as_json, false);
}

struct wake_args {
  std::string name;
  std::uint32_t timeout_ms = 60'000;
};

void wake_named(gpumem::Client& client, const wake_args& args, bool as_json) {
  gpumem::wake_reservation(client, args.name, std::chrono::milliseconds(args.timeout_ms));
  print_reservation(client, args.name, as_json, false);
}

/// What the chosen subcommand does once connected.
using action = std::function<void(gpumem::Client&)>;

/// A subcommand that takes --json after its name too, and chooses @p run when it is given.
CLI::App* add_command(CLI::App& app, const char* name, const char* summary, bool& as_json,
                      action& chosen, action run) {
  auto* sub = app.add_subcommand(name, summary);
  sub->add_flag("--json", as_json, "print JSON instead of a table");
  sub->callback([&chosen, run = std::move(run)] { chosen = run; });
  return sub;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gpumemctl: inspect a running gpumemd, reset its locks, put reservations to sleep "
      "and wake them"};
  app.require_subcommand(1);
  std::string socket_path;
  bool as_json = false;
  app.add_option("-s,--socket", socket_path, "daemon socket (default: $GPUMEM_SOCKET, ...)");
  app.add_flag("--json", as_json, "print JSON instead of a table");
  action chosen;
  for (const auto& each : kCommands) {
    add_command(app, each.name, each.summary, as_json, chosen,
                [&each, &as_json](gpumem::Client& client) { each.run(client, as_json); });
  }

  reset_args reset_with;
  auto* reset_command = add_command(
      app, "reset",
      "make a lock usable again (releasing its holder) or restart a barrier or channel", as_json,
      chosen, [&](gpumem::Client& client) { reset(client, reset_with, as_json); });
  reset_command->add_option("name", reset_with.name, "the lock, barrier or channel")->required();
  reset_command->add_option("--parties", reset_with.parties,
                            "barriers and channels: parties from now on (default: those attached)");

  sleep_args sleep_with;
  auto* sleep_command = add_command(
      app, "sleep",
      "put a reservation to sleep: bytes to host memory, device memory freed (its owner uid or "
      "an administrator)",
      as_json, chosen, [&](gpumem::Client& client) { sleep_named(client, sleep_with, as_json); });
  sleep_command->add_option("name", sleep_with.name, "the reservation")->required();
  sleep_command->add_flag("--discard", sleep_with.discard,
                          "drop the bytes instead of copying them: it wakes zeroed");
  sleep_command->add_option(
      "--deadline", sleep_with.deadline_ms,
      "milliseconds each holder gets to let go of its mapping (default: the daemon's, 5000)");

  wake_args wake_with;
  auto* wake_command = add_command(
      app, "wake",
      "wake a reservation: bytes copied back, holders map them again at the same addresses",
      as_json, chosen, [&](gpumem::Client& client) { wake_named(client, wake_with, as_json); });
  wake_command->add_option("name", wake_with.name, "the reservation")->required();
  wake_command->add_option("--timeout", wake_with.timeout_ms,
                           "milliseconds to wait for the wake to end (default: 60000)");

  std::string status_name;
  auto* status_command = add_command(
      app, "reservation-status",
      "one reservation's state, version, host bytes and last failed sleep or wake", as_json, chosen,
      [&](gpumem::Client& client) { print_reservation(client, status_name, as_json, true); });
  status_command->add_option("name", status_name, "the reservation")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    auto client = gpumem::Client::connect({.socket_path = socket_path, .label = "gpumemctl"});
    chosen(client);
    return 0;
  } catch (const gpumem::Error& error) {
    std::fprintf(stderr, "gpumemctl: %s\n", error.what());
    return 1;
  }
}
