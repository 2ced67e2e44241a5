#include "host_mapping.hpp"

#include <unistd.h>

namespace gpumem::detail {

namespace {
std::size_t page_rounded(std::size_t size) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (size + page - 1) & ~(page - 1);
}
}  // namespace

os::mapping map_host_allocation(int memfd, const proto::allocation_reply& grant, Access access) {
  std::error_code error;
  os::mapping mapped = os::mapping::share(
      memfd, page_rounded(grant.size),
      access == Access::read_write ? os::access::read_write : os::access::read_only, grant.offset,
      error);
  if (error) throw Error(errc::io_error, "mapping allocation: " + error.message());
  return mapped;
}

}  // namespace gpumem::detail
