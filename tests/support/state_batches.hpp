#pragma once
// Journal batches of given changes, for the tests of the daemon's state files (the daemon builds
// its batches record by record, with restart::batch_builder).

#include <optional>
#include <span>
#include <vector>

#include "restart/journal.hpp"

namespace gpumem::testing {

/// A record as a batch changes it.
struct record_change {
  daemon::restart::record_key key;
  std::optional<std::vector<std::byte>> body;  ///< nullopt: the record is erased
};

inline std::vector<std::byte> batch_of(std::span<const record_change> changes) {
  daemon::restart::batch_builder built;
  for (const record_change& change : changes) {
    daemon::restart::record_writer& out = built.begin_record(change.key);
    if (change.body) out.append(*change.body);
    built.end_record(change.body.has_value());
  }
  return std::move(built).take();
}

}  // namespace gpumem::testing
