#include "metrics/family.hpp"

#include <fmt/format.h>

namespace gpumem::daemon::metrics {

namespace {
const char* type_name(metric_type type) noexcept {
  switch (type) {
    case metric_type::counter:
      return "counter";
    case metric_type::histogram:
      return "histogram";
    case metric_type::gauge:
      break;
  }
  return "gauge";
}

// HELP text escapes backslash and newline only; label values escape the double quote too.
std::string escape_help(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

/// `{a="x",b="y"}` with @p extra (a bucket's le) last; nothing for no labels.
void append_labels(std::string& out, const label_set& labels, std::string_view extra_name = {},
                   std::string_view extra_value = {}) {
  if (labels.empty() && extra_name.empty()) return;
  out += '{';
  bool first = true;
  const auto add = [&](std::string_view name, std::string_view value) {
    if (!first) out += ',';
    first = false;
    fmt::format_to(std::back_inserter(out), "{}=\"{}\"", name, escape_label_value(value));
  };
  for (const auto& [name, value] : labels) add(name, value);
  if (!extra_name.empty()) add(extra_name, extra_value);
  out += '}';
}
}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '"') {
      escaped += "\\\"";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

std::string render_text(const snapshot& families) {
  std::string out;
  for (const family& each : families) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", each.name,
                   escape_help(each.help), each.name, type_name(each.type));
    for (const sample& one : each.samples) {
      out += each.name;
      append_labels(out, one.labels);
      fmt::format_to(std::back_inserter(out), " {}\n", one.value);
    }
    for (const histogram_sample& one : each.histograms) {
      for (const auto& [bound, count] : one.buckets) {
        out += each.name;
        out += "_bucket";
        append_labels(out, one.labels, "le", fmt::format("{}", bound));
        fmt::format_to(std::back_inserter(out), " {}\n", count);
      }
      out += each.name;
      out += "_bucket";
      append_labels(out, one.labels, "le", "+Inf");
      fmt::format_to(std::back_inserter(out), " {}\n", one.count);
      out += each.name;
      out += "_sum";
      append_labels(out, one.labels);
      fmt::format_to(std::back_inserter(out), " {}\n", one.sum);
      out += each.name;
      out += "_count";
      append_labels(out, one.labels);
      fmt::format_to(std::back_inserter(out), " {}\n", one.count);
    }
  }
  out += "# EOF\n";
  return out;
}

}  // namespace gpumem::daemon::metrics
