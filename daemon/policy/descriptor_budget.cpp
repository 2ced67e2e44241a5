#include "policy/descriptor_budget.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "config/config.hpp"
#include "request_error.hpp"

namespace gpumem::daemon {

void descriptor_budget::check(std::size_t more, std::string_view what) {
  check_coming(more, what);
  if (counts_.kept_now) promised_ += more;
}

void descriptor_budget::check_coming(std::size_t more, std::string_view what) const {
  if (!counts_.kept_now || more == 0) return;
  const std::size_t kept = counts_.kept_now() + promised_ + counts_.to_come();
  const std::size_t open = counts_.connections_now();
  const std::size_t connecting = max_connections_ - std::min(max_connections_, open);
  const std::size_t held_back = connecting + kFdStoreKeptForTheDaemon;
  const std::size_t room = store_max_ - std::min(store_max_, kept + held_back);
  if (more > room) {
    throw request_error(
        proto::errc::quota_exceeded,
        fmt::format("{}: {} more descriptors would pass fd_store_max ({} of {} kept, {} + {} "
                    "held back for connections and the daemon); what systemd's fd store drops "
                    "is lost at a restart",
                    what, more, kept, store_max_, connecting, kFdStoreKeptForTheDaemon));
  }
}

}  // namespace gpumem::daemon
