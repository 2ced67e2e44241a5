// gpumemctl: inspect a running gpumemd. Links only libgpumem: everything goes over the socket.
//
// client/gpumemctl/ holds the tool: this file (subcommands, options, errors), records.hpp (each
// record's fields, described once for both the table and the JSON), field.hpp (how a field
// description prints), table.hpp (aligned columns), exit_status.hpp (the exit statuses),
// suggestion.hpp (the nearest command to a typo), watch.hpp (--watch) and top.hpp (`top`). It
// may include the public client headers only, never client/src, proto/ internals or daemon/.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "exit_status.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"
#include "live.hpp"
#include "records.hpp"
#include "suggestion.hpp"
#include "top.hpp"
#include "watch.hpp"

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
  print_records(gpumemctl::list_allocations(client), gpumemctl::kAllocationFields, as_json);
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

/// never: it changes something; streams: it prints until interrupted, so nothing repeats it.
enum class repeats { never, streams, with_watch, always };

struct command {
  const char* name;
  const char* summary;
  void (*run)(gpumem::Client&, bool as_json);
  repeats repetition = repeats::with_watch;
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
    {"events", "stream connects, deaths, reclaims, owner deaths, refusals", gpumemctl::events,
     repeats::streams},
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

/// Whether a command prints again and again: commands that only read may, with --watch; `top`
/// always does.
struct chosen_command {
  std::string name;
  action run;
  repeats repetition = repeats::never;
};

/// A subcommand; options of the whole tool (--json, --socket, ...) follow it as well.
CLI::App* add_command(CLI::App& app, const char* name, const char* summary, repeats repetition,
                      std::optional<chosen_command>& chosen, action run) {
  auto* sub = app.add_subcommand(name, summary);
  sub->callback([&chosen, name, repetition, run = std::move(run)] {
    chosen = chosen_command{name, run, repetition};
  });
  return sub;
}

struct tool_options {
  std::string socket_path;
  bool as_json = false;
  bool version = false;
  std::optional<double> watch_seconds;
  std::uint64_t iterations = 0;
};

void add_tool_options(CLI::App& app, tool_options& options) {
  app.add_option("-s,--socket", options.socket_path,
                 "daemon socket (default: $GPUMEM_SOCKET, ...)");
  app.add_flag("--json", options.as_json,
               "print JSON instead of a table (errors too, on stdout, with the exit code)");
  app.add_option("--watch", options.watch_seconds,
                 "print again every SECONDS (listing commands; `top`: its interval, default 2)")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            char* end = nullptr;
            const double seconds = std::strtod(text.c_str(), &end);
            if (end == text.c_str() || *end != '\0' || !std::isfinite(seconds) || seconds <= 0) {
              return "--watch takes a number of seconds above 0, not '" + text + "'";
            }
            return {};
          },
          "SECONDS"));
  // 0 would read as "none" but mean "for ever", the default's meaning: refused.
  app.add_option("-n,--iterations", options.iterations,
                 "with --watch or `top`: stop after N refreshes (default: until interrupted)")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            // Decimal digits only: CLI11 converts with base 0 (010 would be 8) and strtoull
            // skips blanks and takes " -1" for the largest count.
            errno = 0;
            const bool digits = !text.empty() && text.front() != '0' &&
                                text.find_first_not_of("0123456789") == std::string::npos;
            const bool in_range =
                digits && std::strtoull(text.c_str(), nullptr, 10) != 0 && errno == 0;
            if (!in_range) {
              return "--iterations takes a count of refreshes above 0, not '" + text + "'";
            }
            return {};
          },
          "N"));
  app.add_flag("--version", options.version, "print the version and the protocol version");
}

/// A failure reported the way the command line asked: a line on stderr, or with --json a JSON
/// document on one line of stdout, where a program that reads the output finds it (one line, so
/// that it also ends a stream of JSON lines, `events` or `--watch`, as one more line).
int fail(gpumemctl::exit_status status, std::string_view code, const std::string& message,
         bool as_json) {
  if (as_json) {
    // Bytes of the command line that are not UTF-8 are replaced, not thrown over.
    std::cout << gpumemctl::error_json(code, message, status)
                     .dump(-1, ' ', false, gpumemctl::json::error_handler_t::replace)
              << '\n';
  } else {
    std::cerr << "gpumemctl: " << message << '\n';
  }
  return static_cast<int>(status);
}

int bad_arguments(const std::string& message, bool as_json) {
  return fail(gpumemctl::exit_status::bad_arguments, "bad_arguments", message, as_json);
}

int fail(gpumemctl::exit_status status, const gpumem::Error& error, bool as_json) {
  return fail(status, gpumemctl::errc_name(error.status()), error.what(), as_json);
}

void print_version(bool as_json) {
  const auto version = gpumem::version();
  if (as_json) return print_json({{"version", version.release}, {"protocol", version.protocol}});
  std::cout << "gpumemctl " << version.release << " (libgpumem " << version.release << ", protocol "
            << version.protocol << ")\n";
}

/// What is left on the command line once CLI11 took what it knows: a mistyped command, with
/// the nearest one, or arguments no command takes.
std::string leftover_problem(const CLI::App& app, const std::vector<std::string>& leftover,
                             bool command_chosen) {
  if (!command_chosen && !leftover.front().starts_with("-")) {
    std::vector<std::string> names;
    for (const auto* command : app.get_subcommands([](const CLI::App*) { return true; })) {
      names.push_back(command->get_name());
    }
    std::string problem = "unknown command \"" + leftover.front() + "\"";
    if (const auto nearest = gpumemctl::nearest_name(leftover.front(), names)) {
      return problem + "; did you mean \"" + *nearest + "\"?";
    }
    return problem + "; `gpumemctl --help` lists the commands";
  }
  const std::string& first = leftover.front();
  return (first.starts_with("-") ? "unknown option \"" : "unexpected argument \"") + first + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gpumemctl: inspect a running gpumemd, reset its locks, put reservations to sleep "
      "and wake them",
      "gpumemctl"};
  // Options of the whole tool are accepted before and after the command: a command passes
  // those it does not know on to the tool. What is left over is checked below, to name a
  // mistyped command.
  app.fallthrough();
  app.allow_extras();
  app.require_subcommand(0, 1);
  app.footer(
      "Options of gpumemctl (--socket, --json, --watch, -n) go before or after the "
      "command.\n" +
      gpumemctl::exit_statuses_text() +
      "With --json a failure prints {\"error\": {\"code\", \"message\", \"exit_code\"}} on "
      "stdout.");
  tool_options options;
  add_tool_options(app, options);
  const bool& as_json = options.as_json;
  std::optional<chosen_command> chosen;
  for (const auto& each : kCommands) {
    add_command(app, each.name, each.summary, each.repetition, chosen,
                [&each, &as_json](gpumem::Client& client) { each.run(client, as_json); });
  }

  reset_args reset_with;
  auto* reset_command = add_command(
      app, "reset",
      "make a lock usable again (releasing its holder) or restart a barrier or channel",
      repeats::never, chosen, [&](gpumem::Client& client) { reset(client, reset_with, as_json); });
  reset_command->add_option("name", reset_with.name, "the lock, barrier or channel")->required();
  reset_command->add_option("--parties", reset_with.parties,
                            "barriers and channels: parties from now on (default: those attached)");

  sleep_args sleep_with;
  auto* sleep_command = add_command(
      app, "sleep",
      "put a reservation to sleep: bytes to host memory, device memory freed (its owner uid or "
      "an administrator)",
      repeats::never, chosen,
      [&](gpumem::Client& client) { sleep_named(client, sleep_with, as_json); });
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
      repeats::never, chosen,
      [&](gpumem::Client& client) { wake_named(client, wake_with, as_json); });
  wake_command->add_option("name", wake_with.name, "the reservation")->required();
  wake_command->add_option("--timeout", wake_with.timeout_ms,
                           "milliseconds to wait for the wake to end (default: 60000)");

  std::string status_name;
  auto* status_command = add_command(
      app, "reservation-status",
      "one reservation's state, version, host bytes and last failed sleep or wake",
      repeats::with_watch, chosen,
      [&](gpumem::Client& client) { print_reservation(client, status_name, as_json, true); });
  status_command->add_option("name", status_name, "the reservation")->required();

  gpumemctl::top_view top;
  add_command(app, "top",
              "live view of pools and clients with allocations/s and bytes/s, refreshed every "
              "--watch seconds (default 2)",
              repeats::always, chosen, [&](gpumem::Client& client) { top.print(client, as_json); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    // --json may come after what failed to parse, so CLI11 may not have set it yet.
    const bool json_asked = std::any_of(
        argv + 1, argv + argc, [](const char* arg) { return arg == std::string_view("--json"); });
    return bad_arguments(error.what(), json_asked);
  }
  if (options.version) {
    print_version(as_json);
    return 0;
  }
  if (const auto leftover = app.remaining(); !leftover.empty()) {
    return bad_arguments(leftover_problem(app, leftover, chosen.has_value()), as_json);
  }
  if (!chosen) {
    if (as_json) return bad_arguments("no command given: `gpumemctl --help` lists them", true);
    std::cerr << app.help();
    return static_cast<int>(gpumemctl::exit_status::bad_arguments);
  }
  const bool repeating = options.watch_seconds || chosen->repetition == repeats::always;
  if (options.watch_seconds && chosen->repetition == repeats::streams) {
    return bad_arguments(
        "`" + chosen->name + "` streams until interrupted: --watch does not repeat it", as_json);
  }
  if (options.watch_seconds && chosen->repetition == repeats::never) {
    return bad_arguments(
        "--watch repeats commands that only read; `" + chosen->name + "` changes something",
        as_json);
  }
  if (options.iterations != 0 && !repeating) {
    return bad_arguments("--iterations counts the refreshes of --watch or `top`", as_json);
  }

  std::optional<gpumem::Client> client;
  try {
    client = gpumem::Client::connect({.socket_path = options.socket_path, .label = "gpumemctl"});
  } catch (const gpumem::Error& error) {
    return fail(gpumemctl::connect_failure(error.status()), error, as_json);
  }
  try {
    if (repeating) {
      constexpr double kDefaultInterval = 2;
      gpumemctl::watch({.interval = std::chrono::duration<double>(
                            options.watch_seconds.value_or(kDefaultInterval)),
                        .iterations = options.iterations},
                       "gpumemctl " + chosen->name, as_json, [&] { chosen->run(*client); });
    } else {
      chosen->run(*client);
    }
    return 0;
  } catch (const gpumem::Error& error) {
    return fail(gpumemctl::request_failure(error.status()), error, as_json);
  }
}
