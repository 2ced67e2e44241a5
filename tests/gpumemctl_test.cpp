// gpumemctl against a real gpumemd: each subcommand's table and JSON print the fields of one
// description per record (client/gpumemctl/records.hpp), no more and no fewer.
#include <gtest/gtest.h>

#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <type_traits>

#include "gpumem/reservation.hpp"
#include "records.hpp"
#include "support/daemon_process.hpp"
#include "support/gpumemctl_process.hpp"

namespace gpumem::testing {
namespace {

namespace ctl = gpumemctl;
using ctl::json;

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

/// A daemon with something in every listing a host can have (reservations need CUDA).
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
  // Reservations are CUDA memory: without a device the listing is its headings alone.
  std::optional<Reservation> reserved;
  if (client.stats().cuda) reserved.emplace(Reservation::create(client, 2 << 20, {.name = "kv"}));
  const auto output = print_both(daemon, "reservations");
  expect_described(output, output.document, ctl::kReservationFields);
  EXPECT_EQ(output.document.size(), reserved ? 1u : 0u);
}

TEST_F(Gpumemctl, LocksShowTheSyncFields) {
  const auto output = print_both(daemon, "locks");
  expect_described(output, output.document, ctl::kSyncFields);
  EXPECT_EQ(output.document.size(), 2u);
}

}  // namespace
}  // namespace gpumem::testing
