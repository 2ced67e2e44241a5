#include "memory/open_named.hpp"

#include <fmt/format.h>

#include "request_error.hpp"

namespace gpumem::daemon {

object_id open_named(ledger& rows, const access_policy& access, client_id client,
                     object_family family, const proto::open_request& request) {
  const std::string_view name = request.name.view();
  const auto found = rows.find_name(family, name);
  if (!found) {
    throw request_error(proto::errc::not_found,
                        fmt::format("no {} named '{}'", family_name(family), name));
  }
  access.check_open(rows.client(client).who, *found, *rows.find(*found),
                    request.access == proto::access_mode::read_only ? wanted_access::read
                                                                    : wanted_access::read_write,
                    whose_from(request.flags));
  rows.hold(*found, client);
  return *found;
}

}  // namespace gpumem::daemon
