#include "memory/pool.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "request_error.hpp"

namespace gpumem::daemon {

placement pool::allocate(std::uint64_t size) {
  const auto where = do_allocate(size);
  if (!where) {
    throw request_error(
        proto::errc::out_of_memory,
        fmt::format("pool '{}' cannot fit {} bytes: {} of {} bytes in use, largest "
                    "possible allocation {} bytes",
                    config_.name, size, usage_.bytes_in_use, config_.size, largest_possible()));
  }
  usage_.bytes_in_use += size;
  usage_.bytes_reserved += where->reserved_bytes;
  usage_.bytes_in_use_high = std::max(usage_.bytes_in_use_high, usage_.bytes_in_use);
  ++usage_.allocations;
  return *where;
}

void pool::adopt(const placement& where, std::uint64_t size, const grant_details& grant) {
  if (!do_adopt(where, size, grant)) {
    throw request_error(proto::errc::internal,
                        fmt::format("pool '{}' cannot take back {} bytes at {}: not free there",
                                    config_.name, size, where.offset));
  }
  usage_.bytes_in_use += size;
  usage_.bytes_reserved += where.reserved_bytes;
  usage_.bytes_in_use_high = std::max(usage_.bytes_in_use_high, usage_.bytes_in_use);
  ++usage_.allocations;
}

void pool::free(const placement& where, std::uint64_t size) noexcept {
  do_free(where, size);
  usage_.bytes_in_use -= size;
  usage_.bytes_reserved -= where.reserved_bytes;
  --usage_.allocations;
}

}  // namespace gpumem::daemon
