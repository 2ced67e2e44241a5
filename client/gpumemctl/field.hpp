#pragma once
/// @file
/// @brief A record's fields described once, for both outputs of gpumemctl: the JSON object
/// and the table row. A table cell is the field's JSON value, formatted for people.

#include <algorithm>
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "table.hpp"

namespace gpumemctl {

using nlohmann::json;

/// @brief A cell's text: the JSON value as it is (strings unquoted).
template <class Record>
std::string plain(const json& value, const Record& /*record*/) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

/// @brief One field of @p Record as gpumemctl prints it.
template <class Record>
struct field {
  std::string_view heading;  ///< table column (a row label for `status`); empty: JSON only
  std::string_view key;      ///< JSON key; empty: table only
  json (*value)(const Record& record);
  /// The table cell for @p value; @p record is there for cells that depend on another field.
  std::string (*format)(const json& value, const Record& record) = plain;
};

template <class Record>
using fields_of = std::span<const field<Record>>;
template <class Record>
using columns_of = std::span<const field<Record>* const>;

/// @brief Value of a data member: `member<&PoolStats::name>`; Record is deduced from the
/// field it initialises, so a member of a base class serves a derived record.
template <auto data_member, class Record>
json member(const Record& record) {
  return record.*data_member;
}

/// @brief Value of a data member, or null where it holds no data: 0 or empty text, which the
/// daemon's records use for "none" (no draft, no name, an owner that let go).
template <auto data_member, class Record>
json member_or_null(const Record& record) {
  const auto& value = record.*data_member;
  return value == std::remove_cvref_t<decltype(value)>{} ? json(nullptr) : json(value);
}

/// @brief Null, which JSON shows where a record has no such data, and empty text are "-" in a
/// table.
template <class Record>
std::string dash_if_absent(const json& value, const Record& record) {
  const std::string text = value.is_null() ? "" : plain(value, record);
  return text.empty() ? "-" : text;
}

template <class Record>
std::string bytes(const json& value, const Record& /*record*/) {
  return value.is_null() ? "-" : bytes_text(value.get<std::uint64_t>());
}

template <class Record>
std::string duration(const json& value, const Record& /*record*/) {
  return duration_text(value.get<std::uint64_t>());
}

/// @brief The fields of @p fields named by @p headings, in that order; a heading that names
/// no field stops compilation.
template <class Record, std::size_t field_count, std::size_t count>
consteval std::array<const field<Record>*, count> select(
    const field<Record> (&fields)[field_count], const std::string_view (&headings)[count]) {
  std::array<const field<Record>*, count> chosen{};
  for (std::size_t i = 0; i < count; ++i) {
    bool found = false;
    for (const auto& each : fields) {
      if (each.heading != headings[i]) continue;
      chosen[i] = &each;
      found = true;
    }
    if (!found) throw "a column heading names no field";
  }
  return chosen;
}

/// @brief The fields that have a heading, in their order.
template <class Record>
std::vector<const field<Record>*> headed(fields_of<Record> fields) {
  std::vector<const field<Record>*> chosen;
  for (const auto& each : fields) {
    if (!each.heading.empty()) chosen.push_back(&each);
  }
  return chosen;
}

template <class Record>
json record_json(const Record& record, std::type_identity_t<fields_of<Record>> fields) {
  json object = json::object();
  for (const auto& each : fields) {
    if (!each.key.empty()) object[std::string(each.key)] = each.value(record);
  }
  return object;
}

template <class Record>
json records_json(const std::vector<Record>& records,
                  std::type_identity_t<fields_of<Record>> fields) {
  json list = json::array();
  for (const auto& record : records) list.push_back(record_json(record, fields));
  return list;
}

template <class Record>
std::string cell(const field<Record>& column, const Record& record) {
  return column.format(column.value(record), record);
}

/// @brief A cell that says nothing: "-" or empty.
inline bool without_data(const std::string& cell) {
  return cell.empty() || cell == "-";
}

enum class empty_columns { leave_out, keep };

/// @brief A row per record, a column per entry of @p columns, less the columns in which no
/// record has data (the driver's counters on a node without a GPU) unless @p empty says keep;
/// the JSON keeps every field. Without records every column stays, so that the headings say
/// what would be listed.
template <class Record>
table records_table(const std::vector<Record>& records,
                    std::type_identity_t<columns_of<Record>> columns,
                    empty_columns empty = empty_columns::leave_out) {
  std::vector<std::vector<std::string>> cells(records.size());
  std::vector<std::string> headings;
  for (const auto* column : columns) {
    std::vector<std::string> column_cells;
    for (const auto& record : records) column_cells.push_back(cell(*column, record));
    if (empty == empty_columns::leave_out && !records.empty() &&
        std::ranges::all_of(column_cells, without_data)) {
      continue;
    }
    headings.emplace_back(column->heading);
    for (std::size_t i = 0; i < records.size(); ++i) cells[i].push_back(column_cells[i]);
  }
  table rows(std::move(headings));
  for (auto& row : cells) rows.add(std::move(row));
  return rows;
}

/// @brief One record on its side: a row per field with a heading, labelled by it.
template <class Record>
table record_rows(const Record& record, std::type_identity_t<fields_of<Record>> fields) {
  table rows({"", ""});
  for (const auto* column : headed(fields)) {
    rows.add({std::string(column->heading), cell(*column, record)});
  }
  return rows;
}

}  // namespace gpumemctl
