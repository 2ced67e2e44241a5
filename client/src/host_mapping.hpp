#pragma once
/// @file
/// @brief Host allocations in this process: the allocation's range of its pool's memfd,
/// mapped shared, whole pages, and without write permission when the grant is read-only.

#include "gpumem/gpumem.hpp"
#include "gpumem/proto/messages.hpp"
#include "gpumem/shared/os/mapping.hpp"

namespace gpumem::detail {

/// @throws Error(io_error) when the memory cannot be mapped.
os::mapping map_host_allocation(int memfd, const proto::allocation_reply& grant, Access access);

}  // namespace gpumem::detail
