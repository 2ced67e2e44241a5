#pragma once
/// @file
/// @brief daemon/metrics/: the daemon's metrics as Prometheus sees them. A snapshot is a list
/// of families (name, help, type, samples), taken on the loop from the books (collect.hpp) and
/// rendered as text here (gpumemctl metrics) or handed to prometheus-cpp (http_endpoint.hpp).
/// Counting on the request path is request_counters.hpp. May include: proto/ and shared/
/// headers, daemon/books.hpp and what it includes, daemon/events/. Nothing includes it but
/// daemon/handlers/, daemon/books.hpp (the counters) and main.cpp.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::daemon::metrics {

enum class metric_type { gauge, counter, histogram };

using label_set = std::vector<std::pair<std::string, std::string>>;

struct sample {
  label_set labels;
  std::uint64_t value = 0;
};

struct histogram_sample {
  label_set labels;
  /// Upper bounds in seconds with the count of observations at or below each (cumulative),
  /// in increasing order; +Inf is `count`.
  std::vector<std::pair<double, std::uint64_t>> buckets;
  std::uint64_t count = 0;
  double sum = 0;  ///< in seconds
};

/// One metric with all its series. Names carry their unit and, for counters, `_total`, as
/// the text format that node_exporter's textfile collector and promtool read wants them.
struct family {
  std::string name;
  std::string help;
  metric_type type = metric_type::gauge;
  std::vector<sample> samples;               ///< gauges and counters
  std::vector<histogram_sample> histograms;  ///< histograms
};

using snapshot = std::vector<family>;

/// @brief The Prometheus text exposition format (0.0.4) of @p families, each with its # HELP and
/// # TYPE, label values and help escaped, ending with "# EOF" (a comment there, the end marker
/// of OpenMetrics).
std::string render_text(const snapshot& families);

/// @brief @p value escaped as a label value: backslash, double quote and newline.
std::string escape_label_value(std::string_view value);

}  // namespace gpumem::daemon::metrics
