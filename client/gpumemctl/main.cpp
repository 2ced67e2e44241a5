// gpumemctl: inspect a running gpumemd. Links only libgpumem: everything goes over the socket.
//
// client/gpumemctl/ holds the tool: this file (subcommands and options), records.hpp (each
// record's fields, described once for both the table and the JSON), field.hpp (how a field
// description prints) and table.hpp (aligned columns). It may include the public client
// headers only, never client/src, proto/ internals or daemon/.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

#include "gpumem/gpumem.hpp"
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
    {"reservations", "VMM reservations, committed sizes and holders", reservations},
    {"locks", "locks, barriers and channels: state, holder, waiters, deaths", locks},
    {"quotas", "use against quota per uid (yours; every uid's for an administrator)", quotas},
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
