#include "gpumem/shared/os/pidfd.hpp"

#include <poll.h>

namespace gpumem::os {

bool process_exited(int pidfd) noexcept {
  pollfd exited{pidfd, POLLIN, 0};
  return ::poll(&exited, 1, 0) == 1;
}

}  // namespace gpumem::os
