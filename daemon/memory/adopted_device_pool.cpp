#include "memory/adopted_device_pool.hpp"

#include "request_error.hpp"

namespace gpumem::daemon {

grant_details adopted_device_pool::grant_of(const placement& where) const {
  const auto found = exports_.find(where.offset);
  if (found == exports_.end()) {
    throw request_error(proto::errc::internal, "an adopted pool lost an allocation's export data");
  }
  return found->second;
}

bool adopted_device_pool::do_adopt(const placement& where, std::uint64_t,
                                   const grant_details& grant) {
  return exports_.emplace(where.offset, grant).second;
}

}  // namespace gpumem::daemon
