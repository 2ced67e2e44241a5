// The metrics_listen key: where the HTTP endpoint for Prometheus listens (metrics/http_endpoint).
#include <algorithm>
#include <cctype>
#include <string>

#include "config/config_keys.hpp"

namespace gpumem::daemon {

void set_metrics_listen(daemon_config& config, std::string address) {
  if (!address.empty()) {
#ifndef GPUMEM_WITH_PROMETHEUS
    throw config_error("metrics_listen '" + address +
                       "': this gpumemd was built without prometheus-cpp (Debian: "
                       "prometheus-cpp-dev), so it cannot serve HTTP; leave it \"\" and let "
                       "node_exporter's textfile collector read `gpumemctl metrics`");
#endif
    const std::size_t colon = address.rfind(':');
    const std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
    const std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
    const bool digits =
        !port.empty() && port.size() <= 5 &&
        std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
    if (host.empty() || !digits || std::stoul(port) > 65535) {
      throw config_error("metrics_listen '" + address +
                         "' is not HOST:PORT (127.0.0.1:9464, [::1]:9464; port 0: any free one)");
    }
  }
  config.metrics_listen = std::move(address);
}

}  // namespace gpumem::daemon
