// gpumemctl against a real gpumemd: each subcommand's table and JSON print the fields of one
// description per record (client/gpumemctl/records.hpp), no more and no fewer.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <type_traits>

#include "gpumem/reservation.hpp"
#include "records.hpp"
#include "support/daemon_process.hpp"
#include "support/gpumemctl_process.hpp"
#include "support/pattern.hpp"

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

/// The table's columns are @p columns, the JSON records have exactly the keys of @p fields,
/// and both show the same number of records; the table ends with @p trailer_lines of its own.
template <class Record, std::size_t count>
void expect_described(const printed& output, const json& records,
                      const ctl::field<Record> (&fields)[count],
                      std::type_identity_t<ctl::columns_of<Record>> columns,
                      std::size_t trailer_lines = 0) {
  ASSERT_GE(output.table.size(), 1 + trailer_lines);
  EXPECT_EQ(cells(output.table.front()), headings_of(columns)) << output.table.front();
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

/// A daemon with buffers, a lock and a barrier; reservation tests make the reservations they show.
class Gpumemctl : public ::testing::Test {
 protected:
  daemon_process daemon;
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
  EXPECT_EQ(switched.at("draft_version"), 0u);
  EXPECT_EQ(switched.at("committed"), 2 * kChunk);
  EXPECT_EQ(switched.at("oldest_mapped"), 1u) << "the reader has not refreshed";
  EXPECT_EQ(switched.at("retained_bytes"), kChunk) << "version 1, which the reader maps";
  EXPECT_EQ(row_of(committed, "weights", "VERSION"), "2");
  EXPECT_EQ(row_of(committed, "weights", "DRAFT"), "-");
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
  EXPECT_EQ(status.at("host_bytes"), 0u) << "the host copy is returned after wake";

  EXPECT_EQ(owner.refresh(), 2 * kChunk);
  EXPECT_EQ(owner.data(), start);
  EXPECT_EQ(first_mismatch(owner.data(), owner.size(), 7), owner.size());
  const auto awake = print_both(daemon, "reservations");
  EXPECT_EQ(row_of(awake, "w", "STATE"), "awake");
  EXPECT_EQ(row_of(awake, "w", "ON HOST"), "-");
}

TEST_F(Gpumemctl, SleepFailsNamingTheHolderThatKeepsItsMapping) {
  auto owner =
      Reservation::create(client, kChunk, {.device = kHost, .name = "kept", .initial = kChunk});
  fill_pattern(owner.data(), kChunk, 3);
  owner.quiesce();
  auto stubborn_client = daemon.connect("stubborn-reader");
  auto stubborn = Reservation::open(stubborn_client, "kept", {.access = Access::read_only});

  const auto [refused, code] = run_gpumemctl(daemon, {"sleep", "kept", "--deadline", "200"});
  EXPECT_NE(code, 0) << refused;
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
  const std::string config =
      ::testing::TempDir() + "gpumemctl-users-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(config) << "socket_mode: \"0666\"\naccess:\n  connect_users: [65534]\n";
  daemon_process daemon({"--config", config});
  ::chmod(daemon.folder().c_str(), 0755);
  auto owner_client = daemon.connect();
  auto owner = Reservation::create(owner_client, kChunk,
                                   {.device = kHost, .name = "roots", .initial = kChunk});
  owner.quiesce();

  const auto [refused, code] =
      run_gpumemctl(daemon, {"sleep", "roots"}, run_as{.uid = 65534, .gid = 65534});
  EXPECT_NE(code, 0) << refused;
  EXPECT_NE(refused.find("may not put to sleep"), std::string::npos) << refused;
  EXPECT_EQ(owner_client.reservations().at(0).state, ReservationState::awake);
  ::unlink(config.c_str());
}

TEST_F(Gpumemctl, LocksShowTheSyncFields) {
  const auto output = print_both(daemon, "locks");
  expect_described(output, output.document, ctl::kSyncFields);
  EXPECT_EQ(output.document.size(), 2u);
}

}  // namespace
}  // namespace gpumem::testing
