#pragma once
// The address of a Unix socket at a path, for tests that bind or connect by hand.

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace gpumem::testing {

/// @throws std::invalid_argument for a path longer than sockaddr_un holds.
inline sockaddr_un unix_address(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof address.sun_path) {
    throw std::invalid_argument("socket path too long: " + path);
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

}  // namespace gpumem::testing
