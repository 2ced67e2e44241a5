#pragma once
/// @file
/// @brief --check-config's look at the CUDA devices a configuration names, against the devices
/// of this machine: a configuration may be read anywhere, but only the node that runs it can
/// say whether its device 7 exists.

#include <string>
#include <vector>

#include "config/config.hpp"

namespace gpumem::daemon {

/// @brief Checks each CUDA pool's device and peer_access against the devices the CUDA driver
/// sees here.
/// @param source the file the configuration came from, for messages.
/// @return what could not be checked, one line each ("pools[1].device: not checked: ..."), when
/// there is no driver (or no device) to ask.
/// @throws config_error naming @p source, the key (pools[1].device) and the devices there are,
/// for a device this machine does not have, or any CUDA pool when gpumemd was built without
/// the CUDA backend.
std::vector<std::string> check_devices(const daemon_config& config, const std::string& source);

}  // namespace gpumem::daemon
