#include "memory/open_named.hpp"

#include <fmt/format.h>

#include "request_error.hpp"

namespace gpumem::daemon {

object_id open_named(ledger& rows, const access_policy& access, client_id client,
                     object_family family, std::string_view name, proto::access_mode wanted) {
  const auto found = rows.find_name(family, name);
  if (!found) {
    throw request_error(proto::errc::not_found,
                        fmt::format("no {} named '{}'", family_name(family), name));
  }
  access.check_open(
      rows.client(client).who, *found, *rows.find(*found),
      wanted == proto::access_mode::read_only ? wanted_access::read : wanted_access::read_write);
  rows.hold(*found, client);
  return *found;
}

}  // namespace gpumem::daemon
