// gpumemctl against a real gpumemd: each subcommand's table and JSON print the fields of one
// description per record (client/gpumemctl/records.hpp), no more and no fewer, a table leaving
// out the columns no row has data for; options go before or after the command; each failure
// has its documented exit status (client/gpumemctl/exit_status.hpp), as JSON with --json; and
// the live views (--watch, top) print frames a program can read.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <type_traits>

#include "exit_status.hpp"
#include "gpumem/gpumem.h"
#include "gpumem/reservation.hpp"
#include "records.hpp"
#include "support/daemon_process.hpp"
#include "support/gpumemctl_process.hpp"
#include "support/pattern.hpp"
#include "support/temporary_file.hpp"
#include "top.hpp"

namespace gpumem::testing {
namespace {

namespace ctl = gpumemctl;
using ctl::json;

constexpr std::size_t kChunk = 2u << 20;  // the host backend's chunk

template <class Record, std::size_t count>
std::set<std::string> keys_of(const ctl::field<Record> (&fields)[count]) {
  std::set<std::string> keys;
  for (const auto& each : fields) {
    if (!each.key.empty()) keys.emplace(each.key);
  }
  return keys;
}

template <class Record>
std::vector<std::string> headings_of(ctl::columns_of<Record> columns) {
  std::vector<std::string> headings;
  for (const auto* column : columns) headings.emplace_back(column->heading);
  return headings;
}

std::set<std::string> keys_in(const json& object) {
  std::set<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.insert(key);
  return keys;
}

/// Table cells are apart by two spaces or more; a heading has at most one inside.
std::vector<std::string> cells(const std::string& line) {
  static const std::regex gap("  +");
  return {std::sregex_token_iterator(line.begin(), line.end(), gap, -1),
          std::sregex_token_iterator()};
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> all;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) all.push_back(line);
  return all;
}

/// gpumemctl @p command as a table and as JSON.
struct printed {
  std::vector<std::string> table;
  json document;
};

printed print_both(const daemon_process& daemon, const std::string& command) {
  const auto [table, table_code] = run_gpumemctl(daemon, {command});
  EXPECT_EQ(table_code, 0) << table;
  const auto [document, json_code] = run_gpumemctl(daemon, {command, "--json"});
  EXPECT_EQ(json_code, 0) << document;
  return {lines(table), json::parse(document)};
}

/// True when @p shown is @p all less some of its entries, in the same order.
bool left_out_from(const std::vector<std::string>& shown, const std::vector<std::string>& all) {
  auto next = all.begin();
  for (const auto& heading : shown) {
    next = std::find(next, all.end(), heading);
    if (next == all.end()) return false;
    ++next;
  }
  return true;
}

/// The table's columns are @p columns (less those without data in any row), the JSON records
/// have exactly the keys of @p fields, and both show the same number of records; the table
/// ends with @p trailer_lines of its own.
template <class Record, std::size_t count>
void expect_described(const printed& output, const json& records,
                      const ctl::field<Record> (&fields)[count],
                      std::type_identity_t<ctl::columns_of<Record>> columns,
                      std::size_t trailer_lines = 0) {
  ASSERT_GE(output.table.size(), 1 + trailer_lines);
  EXPECT_TRUE(left_out_from(cells(output.table.front()), headings_of(columns)))
      << output.table.front();
  ASSERT_TRUE(records.is_array()) << records;
  EXPECT_EQ(records.size(), output.table.size() - 1 - trailer_lines);
  for (const auto& record : records) EXPECT_EQ(keys_in(record), keys_of(fields)) << record;
}

/// As above, for a table of every field that has a heading.
template <class Record, std::size_t count>
void expect_described(const printed& output, const json& records,
                      const ctl::field<Record> (&fields)[count], std::size_t trailer_lines = 0) {
  expect_described(output, records, fields, ctl::headed<Record>(fields), trailer_lines);
}

bool has_column(const printed& output, const std::string& heading) {
  return std::ranges::count(cells(output.table.front()), heading) == 1;
}

/// The cell of the row that @p name leads in the column headed @p heading; "" when absent.
std::string row_of(const printed& output, const std::string& name, const std::string& heading) {
  const auto headings = cells(output.table.front());
  const auto column =
      static_cast<std::size_t>(std::ranges::find(headings, heading) - headings.begin());
  const auto name_column =
      static_cast<std::size_t>(std::ranges::find(headings, "NAME") - headings.begin());
  if (column == headings.size() || name_column == headings.size()) return "";
  for (const auto& line : output.table) {
    const auto row = cells(line);
    if (row.size() == headings.size() && row[name_column] == name) return row[column];
  }
  return "";
}

/// The daemon's arguments for the pools of a machine without a GPU, on any machine: the CUDA
/// driver is shown no device, so the embedded default adds no CUDA pool and the tables have the
/// same rows and columns on the GPU machine. Children (the daemon, gpumemctl) inherit it.
std::vector<std::string> pools_of_a_machine_without_gpus() {
  ::setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  return {};
}

/// A daemon with buffers, a lock and a barrier; reservation tests make the reservations they show.
class Gpumemctl : public ::testing::Test {
 protected:
  daemon_process daemon{pools_of_a_machine_without_gpus()};
  Client client = daemon.connect();
  Buffer named = client.allocate(4096, {.name = "shown"});
  Buffer anonymous = client.allocate(8192);
  Lock lock = client.lock("shown.lock");
  Barrier barrier = client.barrier("shown.barrier", 2);
};

TEST_F(Gpumemctl, StatusLabelsItsRowsAndKeysItsJsonByTheStatusFields) {
  const auto output = print_both(daemon, "status");
  std::vector<std::string> labels;
  for (const auto& line : output.table) labels.push_back(cells(line).front());
  EXPECT_EQ(labels,
            headings_of<ctl::daemon_status>(ctl::headed<ctl::daemon_status>(ctl::kStatusFields)));
  EXPECT_EQ(keys_in(output.document), keys_of(ctl::kStatusFields));
}

TEST_F(Gpumemctl, StatsAndPoolsShowTheirColumnsOfThePoolFields) {
  const auto stats = print_both(daemon, "stats");
  EXPECT_EQ(keys_in(stats.document), (std::set<std::string>{"pools", "clients"}));
  for (const char* driver : {"DRIVER USED", "DRIVER RESERVED", "DRIVER HIGH"}) {
    EXPECT_FALSE(has_column(stats, driver)) << driver << ": host pools only, no data";
  }
  for (const char* key : {"driver_used_current", "driver_used_high", "driver_reserved_current",
                          "driver_reserved_high"}) {
    EXPECT_TRUE(stats.document.at("pools").at(0).at(key).is_null()) << key;
  }
  expect_described(stats, stats.document.at("pools"), ctl::kPoolFields, ctl::kStatsColumns, 1);
  EXPECT_EQ(stats.table.back(), stats.document.at("clients").dump() + " client(s)");
  // The README documents these keys of `gpumemctl stats --json`.
  for (const char* key : {"name", "device", "bytes_in_use", "bytes_reserved", "bytes_in_use_high",
                          "size_limit", "allocations", "id"}) {
    EXPECT_TRUE(keys_of(ctl::kPoolFields).contains(key)) << key;
  }

  const auto pools = print_both(daemon, "pools");
  expect_described(pools, pools.document, ctl::kPoolFields, ctl::kPoolsColumns);
}

TEST_F(Gpumemctl, ClientsShowTheClientFieldsAndMarkTheAskingProcess) {
  const auto output = print_both(daemon, "clients");
  expect_described(output, output.document, ctl::kClientFields, 1);
  EXPECT_EQ(output.table.back(), "(* this gpumemctl)");
  ASSERT_EQ(output.document.size(), 2u);  // this test and the gpumemctl that asked
  EXPECT_NE(output.document.at(0).at("self"), output.document.at(1).at("self"));
}

TEST_F(Gpumemctl, AllocationsShowTheAllocationFields) {
  const auto output = print_both(daemon, "allocations");
  expect_described(output, output.document, ctl::kAllocationFields);
  EXPECT_EQ(output.document.size(), 2u);
}

TEST_F(Gpumemctl, AllocationsNameThePoolAndTheOwnersProcessAndLabel) {
  const auto output = print_both(daemon, "allocations");
  EXPECT_EQ(cells(output.table.front()),
            headings_of<ctl::listed_allocation>(
                ctl::headed<ctl::listed_allocation>(ctl::kAllocationFields)))
      << "every column has data here";
  EXPECT_EQ(row_of(output, "shown", "POOL"), "host");
  EXPECT_EQ(row_of(output, "shown", "PID"), std::to_string(::getpid()));
  EXPECT_EQ(row_of(output, "shown", "LABEL"), "test");
  EXPECT_EQ(row_of(output, "shown", "OWNER"), std::to_string(client.id()));
  for (const auto& allocation : output.document) {
    EXPECT_EQ(allocation.at("pool_name"), "host") << allocation;
    EXPECT_EQ(allocation.at("pool"), 0u) << allocation;
    EXPECT_EQ(allocation.at("owner_pid"), ::getpid()) << allocation;
    EXPECT_EQ(allocation.at("owner_label"), "test") << allocation;
  }
}

TEST_F(Gpumemctl, AnAllocationWhoseOwnerLetGoShowsNoOwnerProcess) {
  auto holder_client = daemon.connect("holder");
  Buffer held = holder_client.open("shown");
  named.release();
  const auto output = print_both(daemon, "allocations");
  EXPECT_EQ(row_of(output, "shown", "OWNER"), "(gone)");
  EXPECT_EQ(row_of(output, "shown", "PID"), "-");
  const auto shown = std::ranges::find(output.document, json("shown"),
                                       [](const json& each) { return each.at("name"); });
  ASSERT_NE(shown, output.document.end()) << output.document;
  EXPECT_TRUE(shown->at("owner_client").is_null()) << *shown;
  EXPECT_TRUE(shown->at("owner_pid").is_null()) << *shown;
  EXPECT_TRUE(shown->at("owner_label").is_null()) << *shown;
  const auto unnamed = std::ranges::find(output.document, json(nullptr),
                                         [](const json& each) { return each.at("name"); });
  EXPECT_NE(unnamed, output.document.end()) << "an anonymous allocation's name is null";
}

TEST_F(Gpumemctl, ReservationsShowTheReservationFields) {
  auto reserved = Reservation::create(client, kChunk, {.device = kHost, .name = "kv"});
  const auto output = print_both(daemon, "reservations");
  expect_described(output, output.document, ctl::kReservationFields);
  EXPECT_EQ(output.document.size(), 1u);
}

TEST_F(Gpumemctl, ReservationsShowTheVersionEachHolderMapsAndTheDraft) {
  auto owner = Reservation::create(client, 4 * kChunk,
                                   {.device = kHost, .name = "weights", .initial = kChunk});
  auto reader_client = daemon.connect("reader");
  auto reader = Reservation::open(reader_client, "weights", {.access = Access::read_only});
  auto draft = owner.begin_version(2 * kChunk);

  const auto drafting = print_both(daemon, "reservations");
  ASSERT_EQ(drafting.document.size(), 1u);
  const json& writing = drafting.document.at(0);
  EXPECT_EQ(writing.at("state"), "awake");
  EXPECT_EQ(writing.at("version"), 1u);
  EXPECT_EQ(writing.at("draft_version"), 2u);
  EXPECT_EQ(writing.at("holders_current"), 2u);
  EXPECT_EQ(writing.at("holders_behind"), 0u);
  EXPECT_EQ(writing.at("retained_bytes"), 2 * kChunk) << "the draft's chunks";
  EXPECT_EQ(row_of(drafting, "weights", "DRAFT"), "2");

  draft.commit();
  const auto committed = print_both(daemon, "reservations");
  const json& switched = committed.document.at(0);
  EXPECT_EQ(switched.at("version"), 2u);
  EXPECT_TRUE(switched.at("draft_version").is_null()) << "no draft: null, not 0";
  EXPECT_EQ(switched.at("committed"), 2 * kChunk);
  EXPECT_EQ(switched.at("oldest_mapped"), 1u) << "the reader has not refreshed";
  EXPECT_EQ(switched.at("retained_bytes"), kChunk) << "version 1, which the reader maps";
  EXPECT_EQ(row_of(committed, "weights", "VERSION"), "2");
  EXPECT_FALSE(has_column(committed, "DRAFT")) << "no row has a draft: the column is left out";
  EXPECT_EQ(row_of(committed, "weights", "CURRENT/BEHIND"), "1/1");
  EXPECT_EQ(row_of(committed, "weights", "OLDEST MAPPED"), "1");

  reader.refresh();
  const auto caught_up = print_both(daemon, "reservations");
  EXPECT_EQ(row_of(caught_up, "weights", "CURRENT/BEHIND"), "2/0");
  EXPECT_EQ(row_of(caught_up, "weights", "OLDEST MAPPED"), "2");
  EXPECT_EQ(caught_up.document.at(0).at("retained_bytes"), 0u) << "version 1 is freed";
}

TEST_F(Gpumemctl, SleepThenWakeByNameKeepsTheBytesAtTheSameAddress) {
  auto owner = Reservation::create(client, 4 * kChunk,
                                   {.device = kHost, .name = "w", .initial = 2 * kChunk});
  fill_pattern(owner.data(), owner.size(), 7);
  void* const start = owner.data();
  owner.quiesce();  // this process waits for gpumemctl below: it lets go beforehand

  const auto [slept, slept_code] = run_gpumemctl(daemon, {"sleep", "w"});
  EXPECT_EQ(slept_code, 0) << slept;
  EXPECT_EQ(slept, "reservation 'w' asleep: 4.0 MiB on the host\n");
  const auto [again, again_code] = run_gpumemctl(daemon, {"sleep", "w", "--json"});
  EXPECT_EQ(again_code, static_cast<int>(ctl::exit_status::busy)) << again;
  EXPECT_EQ(json::parse(again).at("error").at("code"), "wrong_state") << again;
  const auto asleep = print_both(daemon, "reservations");
  EXPECT_EQ(asleep.document.at(0).at("state"), "asleep");
  EXPECT_EQ(asleep.document.at(0).at("host_bytes"), 2 * kChunk);
  EXPECT_EQ(row_of(asleep, "w", "ON HOST"), "4.0 MiB");

  const auto [woken, woken_code] = run_gpumemctl(daemon, {"wake", "w", "--json"});
  ASSERT_EQ(woken_code, 0) << woken;
  const json status = json::parse(woken);
  EXPECT_EQ(keys_in(status), keys_of(ctl::kReservationStatusFields));
  EXPECT_EQ(status.at("name"), "w");
  EXPECT_EQ(status.at("state"), "awake");
  EXPECT_TRUE(status.at("host_bytes").is_null()) << "the host copy is returned after wake";
  EXPECT_TRUE(status.at("error").is_null());
  EXPECT_TRUE(status.at("reason").is_null()) << "no failure, no reason";
  EXPECT_EQ(run_gpumemctl(daemon, {"wake", "w"}).second, static_cast<int>(ctl::exit_status::busy))
      << "it is awake already";

  EXPECT_EQ(owner.refresh(), 2 * kChunk);
  EXPECT_EQ(owner.data(), start);
  EXPECT_EQ(first_mismatch(owner.data(), owner.size(), 7), owner.size());
  const auto awake = print_both(daemon, "reservations");
  EXPECT_EQ(row_of(awake, "w", "STATE"), "awake");
  EXPECT_FALSE(has_column(awake, "ON HOST")) << "no row is on the host: the column is left out";
}

TEST_F(Gpumemctl, SleepFailsNamingTheHolderThatKeepsItsMapping) {
  auto owner =
      Reservation::create(client, kChunk, {.device = kHost, .name = "kept", .initial = kChunk});
  fill_pattern(owner.data(), kChunk, 3);
  owner.quiesce();
  auto stubborn_client = daemon.connect("stubborn-reader");
  auto stubborn = Reservation::open(stubborn_client, "kept", {.access = Access::read_only});

  const auto [refused, code] = run_gpumemctl(daemon, {"sleep", "kept", "--deadline", "200"});
  EXPECT_EQ(code, static_cast<int>(ctl::exit_status::busy)) << refused;
  EXPECT_NE(refused.find("stubborn-reader"), std::string::npos) << refused;
  EXPECT_NE(refused.find("did not let go"), std::string::npos) << refused;
  EXPECT_EQ(first_mismatch(stubborn.data(), kChunk, 3), kChunk) << "nothing was freed under it";

  const auto [status, status_code] =
      run_gpumemctl(daemon, {"reservation-status", "kept", "--json"});
  ASSERT_EQ(status_code, 0) << status;
  const json shown = json::parse(status);
  EXPECT_EQ(shown.at("state"), "awake");
  EXPECT_EQ(shown.at("error"), "in use");
  EXPECT_NE(shown.at("reason").get<std::string>().find("stubborn-reader"), std::string::npos);
}

TEST(GpumemctlAcrossUsers, AStrangerCannotPutAnotherUsersReservationToSleep) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run gpumemctl as another uid";
  const gpumem::testing::temporary_file config(
      "gpumemctl-users", "socket_mode: \"0666\"\naccess:\n  connect_users: [65534]\n");
  daemon_process daemon({"--config", config.path()});
  ::chmod(daemon.folder().c_str(), 0755);
  auto owner_client = daemon.connect();
  auto owner = Reservation::create(owner_client, kChunk,
                                   {.device = kHost, .name = "roots", .initial = kChunk});
  owner.quiesce();

  const auto [refused, code] =
      run_gpumemctl(daemon, {"sleep", "roots"}, run_as{.uid = 65534, .gid = 65534});
  EXPECT_EQ(code, static_cast<int>(ctl::exit_status::permission_denied)) << refused;
  EXPECT_NE(refused.find("may not put to sleep"), std::string::npos) << refused;
  EXPECT_EQ(owner_client.reservations().at(0).state, ReservationState::awake);
}

TEST_F(Gpumemctl, LocksShowTheSyncFields) {
  const auto output = print_both(daemon, "locks");
  expect_described(output, output.document, ctl::kSyncFields);
  ASSERT_EQ(output.document.size(), 2u);
  const auto named_object = [&](const char* name) {
    const auto found = std::ranges::find(output.document, json(name),
                                         [](const json& each) { return each.at("name"); });
    return found == output.document.end() ? json::object() : *found;
  };
  // What a kind of object does not have, or a free lock's owner, is null, not 0.
  const json free_lock = named_object("shown.lock");
  EXPECT_EQ(free_lock.at("queued"), 0u) << free_lock;
  EXPECT_TRUE(free_lock.at("parties").is_null()) << free_lock;
  EXPECT_TRUE(free_lock.at("owner_client").is_null()) << free_lock;
  EXPECT_EQ(row_of(output, "shown.lock", "PARTIES"), "-");
  const json barrier_row = named_object("shown.barrier");
  EXPECT_EQ(barrier_row.at("parties"), 2u) << barrier_row;
  EXPECT_TRUE(barrier_row.at("queued").is_null()) << barrier_row;
  EXPECT_EQ(row_of(output, "shown.barrier", "QUEUED"), "-");
}

template <class Record, std::size_t count>
void expect_every_column_keyed(const ctl::field<Record> (&fields)[count]) {
  for (const auto& each : fields) {
    if (!each.heading.empty()) {
      EXPECT_FALSE(each.key.empty()) << each.heading << " has no key";
    }
  }
}

TEST(GpumemctlFields, EveryFieldATableShowsIsInTheJsonToo) {
  expect_every_column_keyed(ctl::kStatusFields);
  expect_every_column_keyed(ctl::kPoolFields);
  expect_every_column_keyed(ctl::kClientFields);
  expect_every_column_keyed(ctl::kUsageFields);
  expect_every_column_keyed(ctl::kAllocationFields);
  expect_every_column_keyed(ctl::kReservationFields);
  expect_every_column_keyed(ctl::kReservationStatusFields);
  expect_every_column_keyed(ctl::kSyncFields);
  expect_every_column_keyed(ctl::kPoolActivityFields);
  expect_every_column_keyed(ctl::kClientActivityFields);
}

int exit_code_of(ctl::exit_status status) {
  return static_cast<int>(status);
}

/// The error gpumemctl --json printed: {"error": {"code", "message", "exit_code"}}.
json json_error(const std::string& output) {
  EXPECT_EQ(std::ranges::count(output, '\n'), 1) << "one line, as in a stream of JSON lines";
  const json document = json::parse(output);
  EXPECT_EQ(keys_in(document), std::set<std::string>{"error"}) << document;
  EXPECT_EQ(keys_in(document.at("error")), (std::set<std::string>{"code", "message", "exit_code"}))
      << document;
  return document.at("error");
}

TEST_F(Gpumemctl, OptionsOfTheToolComeBeforeOrAfterTheCommand) {
  const auto [before, before_code] =
      run_gpumemctl({"--socket", daemon.socket_path(), "--json", "reset", "shown.lock"});
  EXPECT_EQ(before_code, 0) << before;
  EXPECT_EQ(json::parse(before), json({{"reset", "shown.lock"}}));

  const auto [after, after_code] =
      run_gpumemctl({"reset", "shown.lock", "--json", "--socket", daemon.socket_path()});
  EXPECT_EQ(after_code, 0) << after;
  EXPECT_EQ(json::parse(after), json({{"reset", "shown.lock"}}));

  const auto [stats, stats_code] = run_gpumemctl({"stats", "--socket", daemon.socket_path()});
  EXPECT_EQ(stats_code, 0) << stats;
  EXPECT_EQ(cells(lines(stats).front()).front(), "POOL") << stats;

  const auto [mixed, mixed_code] =
      run_gpumemctl({"-s", daemon.socket_path(), "wake", "--json", "nothing", "--timeout", "10"});
  EXPECT_EQ(mixed_code, exit_code_of(ctl::exit_status::not_found)) << mixed;
  EXPECT_EQ(json_error(mixed).at("code"), "not_found");
}

TEST(GpumemctlCommandLine, AMistypedCommandNamesTheNearestOneAndIsABadArgument) {
  const auto [typo, code] = run_gpumemctl({"lock"});
  EXPECT_EQ(code, exit_code_of(ctl::exit_status::bad_arguments)) << typo;
  EXPECT_EQ(typo, "gpumemctl: unknown command \"lock\"; did you mean \"locks\"?\n");

  const auto [far, far_code] = run_gpumemctl({"frobnicate"});
  EXPECT_EQ(far_code, exit_code_of(ctl::exit_status::bad_arguments)) << far;
  EXPECT_NE(far.find("unknown command \"frobnicate\"; `gpumemctl --help` lists the commands"),
            std::string::npos)
      << far;

  const auto [as_json, json_code] = run_gpumemctl({"--json", "stat"});
  EXPECT_EQ(json_code, exit_code_of(ctl::exit_status::bad_arguments)) << as_json;
  const json error = json_error(as_json);
  EXPECT_EQ(error.at("code"), "bad_arguments");
  EXPECT_EQ(error.at("exit_code"), json_code);
  EXPECT_EQ(error.at("message"), "unknown command \"stat\"; did you mean \"stats\"?");
}

TEST(GpumemctlCommandLine, UnknownOptionsAndMissingArgumentsAreBadArguments) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"stats", "--bogus"},
                                               {"reset"},
                                               {"locks", "extra"},
                                               {"reset", "x", "--watch", "1"},
                                               {"stats", "-n", "2"},
                                               {"stats", "--watch", "0"},
                                               {"events", "--watch", "1"}}) {
    const auto [output, code] = run_gpumemctl(args);
    EXPECT_EQ(code, exit_code_of(ctl::exit_status::bad_arguments))
        << args.front() << ": " << output;
  }
  for (const char* count : {"0", "-1", " -1", "010", "x", "99999999999999999999999"}) {
    const auto [output, code] = run_gpumemctl({"top", "-n", count});
    EXPECT_EQ(code, exit_code_of(ctl::exit_status::bad_arguments)) << count;
    EXPECT_NE(output.find(std::string("--iterations takes a count of refreshes above 0, not '") +
                          count + "'"),
              std::string::npos)
        << output;
  }
  for (const char* seconds : {"0", "-1", "abc", "inf"}) {
    const auto [output, code] = run_gpumemctl({"stats", "--watch", seconds});
    EXPECT_EQ(code, exit_code_of(ctl::exit_status::bad_arguments)) << seconds;
    EXPECT_NE(output.find(std::string("--watch takes a number of seconds above 0, not '") +
                          seconds + "'"),
              std::string::npos)
        << output;
  }
}

TEST(GpumemctlCommandLine, NoCommandListsTheCommandsAndTheExitStatuses) {
  const auto [help, code] = run_gpumemctl({});
  EXPECT_EQ(code, exit_code_of(ctl::exit_status::bad_arguments));
  for (const char* command :
       {"status", "stats", "pools", "clients", "allocations", "reservations", "locks", "quotas",
        "ping", "reset", "sleep", "wake", "reservation-status", "top"}) {
    EXPECT_TRUE(std::regex_search(help, std::regex("\n  " + std::string(command) + " ")))
        << command << " is not listed:\n"
        << help;
  }
  EXPECT_NE(help.find(ctl::exit_statuses_text()), std::string::npos) << help;
}

TEST(GpumemctlCommandLine, VersionIsTheLibrarysReleaseAndProtocol) {
  const std::string release = GPUMEM_PROJECT_VERSION;
  EXPECT_EQ(gpumem::version().release, release);
  EXPECT_EQ(gpumem_version(), release);
  EXPECT_EQ(gpumem_protocol_version(), gpumem::version().protocol);

  const auto [text, code] = run_gpumemctl({"--version"});
  EXPECT_EQ(code, 0) << text;
  EXPECT_EQ(text, "gpumemctl " + release + " (libgpumem " + release + ", protocol " +
                      std::to_string(gpumem::version().protocol) + ")\n");
  const auto [as_json, json_code] = run_gpumemctl({"--version", "--json"});
  EXPECT_EQ(json_code, 0) << as_json;
  EXPECT_EQ(json::parse(as_json),
            json({{"version", release}, {"protocol", gpumem::version().protocol}}));
}

TEST(GpumemctlExitStatus, NoDaemonAtTheSocketIsThree) {
  const std::string nowhere = ::testing::TempDir() + "no-gpumemd-" + std::to_string(::getpid());
  const auto [text, code] = run_gpumemctl({"--socket", nowhere + "/gpumemd.sock", "status"});
  EXPECT_EQ(code, exit_code_of(ctl::exit_status::no_daemon)) << text;
  EXPECT_NE(text.find("cannot reach gpumemd"), std::string::npos) << text;

  const auto [as_json, json_code] =
      run_gpumemctl({"status", "--json", "--socket", nowhere + "/gpumemd.sock"});
  EXPECT_EQ(json_code, exit_code_of(ctl::exit_status::no_daemon)) << as_json;
  const json error = json_error(as_json);
  EXPECT_EQ(error.at("code"), "io_error");
  EXPECT_EQ(error.at("exit_code"), json_code);
}

TEST_F(Gpumemctl, ANameThatNamesNothingIsFour) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"reset", "nothing"},
                                               {"sleep", "nothing"},
                                               {"reservation-status", "nothing"}}) {
    const auto [text, code] = run_gpumemctl(daemon, args);
    EXPECT_EQ(code, exit_code_of(ctl::exit_status::not_found)) << args.front() << ": " << text;
    auto with_json = args;
    with_json.push_back("--json");
    const auto [as_json, json_code] = run_gpumemctl(daemon, with_json);
    EXPECT_EQ(json_code, code) << as_json;
    const json error = json_error(as_json);
    EXPECT_EQ(error.at("code"), "not_found");
    EXPECT_EQ(error.at("exit_code"), code);
    EXPECT_NE(error.at("message").get<std::string>().find("nothing"), std::string::npos) << error;
  }
}

TEST(GpumemctlAcrossUsers, ASocketThisUserMayNotOpenIsFive) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run gpumemctl as another uid";
  daemon_process daemon;  // socket mode 0600: its owner only
  ::chmod(daemon.folder().c_str(), 0755);
  const auto [text, code] = run_gpumemctl(daemon, {"status"}, run_as{.uid = 65534, .gid = 65534});
  EXPECT_EQ(code, exit_code_of(ctl::exit_status::permission_denied)) << text;
  const auto [as_json, json_code] =
      run_gpumemctl(daemon, {"status", "--json"}, run_as{.uid = 65534, .gid = 65534});
  EXPECT_EQ(json_code, code) << as_json;
  EXPECT_EQ(json_error(as_json).at("code"), "permission_denied");
}

/// The README's table and the man page's EXIT STATUS give each status its meaning: what
/// kExitStatuses says before any colon.
TEST(GpumemctlExitStatus, TheReadmeAndTheManPageDocumentEachStatus) {
  const auto text_of = [](const char* document) {
    std::ifstream file(std::string(GPUMEM_SOURCE_DIR) + "/" + document);
    EXPECT_TRUE(file) << document;
    return std::string{std::istreambuf_iterator<char>(file), {}};
  };
  const std::string readme = text_of("README.md");
  const std::string man_page = text_of("man/gpumemctl.1");
  for (const auto& row : ctl::kExitStatuses) {
    const std::string number = std::to_string(static_cast<int>(row.status));
    const std::string meaning(row.meaning.substr(0, row.meaning.find(':')));
    const auto icase = std::regex::ECMAScript | std::regex::icase;
    EXPECT_TRUE(std::regex_search(readme, std::regex("\n\\| " + number + " \\| " + meaning, icase)))
        << "README.md: exit status " << number << " is not documented as " << meaning;
    EXPECT_TRUE(std::regex_search(man_page, std::regex("\n\\.B " + number + "\n" + meaning, icase)))
        << "man/gpumemctl.1: exit status " << number << " is not documented as " << meaning;
  }
}

/// Frames of a --watch or top run that is not on a terminal: each begins with its heading
/// line "Every ...".
std::vector<std::vector<std::string>> frames_of(const std::string& output) {
  std::vector<std::vector<std::string>> frames;
  for (const auto& line : lines(output)) {
    if (line.starts_with("Every ")) {
      frames.emplace_back();
    } else if (!frames.empty() && !line.empty()) {
      frames.back().push_back(line);
    }
  }
  return frames;
}

TEST_F(Gpumemctl, WatchPrintsTheListingAsManyTimesAsAsked) {
  const auto [text, code] = run_gpumemctl(daemon, {"pools", "--watch", "0.1", "-n", "3"});
  EXPECT_EQ(code, 0) << text;
  EXPECT_TRUE(lines(text).front().starts_with("Every 0.1s: gpumemctl pools  ")) << text;
  const auto frames = frames_of(text);
  ASSERT_EQ(frames.size(), 3u) << text;
  for (const auto& frame : frames) {
    ASSERT_EQ(frame.size(), 2u) << text;  // the headings and the host pool
    EXPECT_TRUE(
        left_out_from(cells(frame.front()), headings_of<gpumem::PoolStats>(ctl::kPoolsColumns)))
        << frame.front();
  }

  const auto [as_json, json_code] =
      run_gpumemctl(daemon, {"--watch", "0.1", "--iterations", "2", "--json", "stats"});
  EXPECT_EQ(json_code, 0) << as_json;
  const auto json_lines = lines(as_json);
  ASSERT_EQ(json_lines.size(), 2u) << as_json;
  for (const auto& line : json_lines) {
    EXPECT_EQ(keys_in(json::parse(line)), (std::set<std::string>{"pools", "clients"})) << line;
  }
}

TEST_F(Gpumemctl, TopShowsPoolsAndClientsWithTheirRatesFromTheSecondRefresh) {
  const auto [text, code] = run_gpumemctl(daemon, {"top", "-n", "2", "--watch", "0.1"});
  EXPECT_EQ(code, 0) << text;
  const auto frames = frames_of(text);
  ASSERT_EQ(frames.size(), 2u) << text;
  const auto pool_headings =
      headings_of<ctl::pool_activity>(ctl::headed<ctl::pool_activity>(ctl::kPoolActivityFields));
  const auto client_headings = headings_of<ctl::client_activity>(
      ctl::headed<ctl::client_activity>(ctl::kClientActivityFields));
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const auto& frame = frames[i];
    // A summary, the pool table (headings, the host pool), the client table (headings, this
    // test, gpumemctl).
    ASSERT_EQ(frame.size(), 6u) << text;
    EXPECT_TRUE(frame[0].starts_with("gpumemd pid " + std::to_string(daemon.pid()))) << frame[0];
    EXPECT_EQ(cells(frame[1]), pool_headings);
    EXPECT_EQ(cells(frame[3]), client_headings);
    const auto pool = cells(frame[2]);
    ASSERT_EQ(pool.size(), pool_headings.size()) << frame[2];
    EXPECT_EQ(pool.front(), "host");
    EXPECT_EQ(pool.back(), i == 0 ? "-" : "0 B/s") << "nothing changed between the refreshes";
  }
}

TEST_F(Gpumemctl, TopReportsTheAllocationsMadeBetweenRefreshes) {
  auto top = start_gpumemctl(daemon, {"top", "--json", "-n", "2", "--watch", "1"});
  const auto first = top.read_line();
  ASSERT_TRUE(first);
  const json before = json::parse(*first);
  EXPECT_TRUE(before.at("pools").at(0).at("allocations_per_s").is_null()) << before;
  Buffer added = client.allocate(4u << 20);
  const auto second = top.read_line();
  ASSERT_TRUE(second);
  const json after = json::parse(*second);
  const json& pool = after.at("pools").at(0);
  EXPECT_GT(pool.at("allocations_per_s").get<double>(), 0) << pool;
  EXPECT_GT(pool.at("bytes_in_use_per_s").get<double>(), 0) << pool;
  const auto tester = std::ranges::find(after.at("clients"), json(client.id()),
                                        [](const json& each) { return each.at("id"); });
  ASSERT_NE(tester, after.at("clients").end()) << after;
  EXPECT_GT(tester->at("allocations_per_s").get<double>(), 0) << *tester;
  EXPECT_GT(tester->at("bytes_owned_per_s").get<double>(), 0) << *tester;
  const auto status = top.wait();
  ASSERT_TRUE(status);
  EXPECT_EQ(exit_code(*status), 0);
}

/// gpumemctl's calls are routine: a daemon at log level info writes nothing for them.
TEST(GpumemctlLogging, ACallLeavesNoLineInTheDaemonsLogAtInfo) {
  const std::string folder = ::testing::TempDir() + "gpumemctl-log-" + std::to_string(::getpid());
  ::mkdir(folder.c_str(), 0700);
  const std::string socket = folder + "/gpumemd.sock";
  child_process daemon({daemon_binary(), "--socket", socket, "--log-level", "info"}, {},
                       {.stderr_to_stdout = true, .user = std::nullopt});
  for (;;) {
    const auto line = daemon.read_line();
    ASSERT_TRUE(line) << "gpumemd did not say it listens";
    if (line->find("listening on") != std::string::npos) break;
  }
  for (const char* command : {"status", "clients", "allocations", "locks", "ping"}) {
    const auto [output, code] = run_gpumemctl({"--socket", socket, command});
    EXPECT_EQ(code, 0) << output;
  }
  const auto logged = daemon.read_line(std::chrono::milliseconds(500));
  EXPECT_FALSE(logged) << "gpumemd logged: " << *logged;
  daemon.signal(SIGTERM);
  daemon.wait();
  ::unlink(socket.c_str());
  ::rmdir(folder.c_str());
}

}  // namespace
}  // namespace gpumem::testing
