#pragma once
/// @file
/// @brief Opening an object by name, as allocations and reservations do: found, allowed, held.

#include <string_view>

#include "gpumem/proto/messages.hpp"
#include "ledger/ledger.hpp"
#include "policy/access_policy.hpp"

namespace gpumem::daemon {

/// @brief The id of the object that @p request names in @p family, held once more by
/// @p client. @throws request_error not_found, permission_denied.
object_id open_named(ledger& rows, const access_policy& access, client_id client,
                     object_family family, const proto::open_request& request);

}  // namespace gpumem::daemon
