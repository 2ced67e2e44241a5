#pragma once
// One unlabelled sample of the daemon's metrics text (Client::metrics()).

#include <string>

namespace gpumem::testing {

/// @brief The value of the sample line `NAME VALUE` in @p metrics; -1 when there is none.
inline double metric_value(const std::string& metrics, const std::string& name) {
  const std::size_t at = metrics.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(metrics.substr(at + name.size() + 2));
}

}  // namespace gpumem::testing
