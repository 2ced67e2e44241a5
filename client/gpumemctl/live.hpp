#pragma once
/// @file
/// @brief The subcommands that watch the daemon rather than list it: `metrics` (Prometheus
/// text for node_exporter's textfile collector) and `events` (a stream of what happens).

#include "gpumem/gpumem.hpp"

namespace gpumemctl {

/// @brief Prints the daemon's metrics as Prometheus text; with @p as_json, as {"metrics": TEXT}.
void metrics(gpumem::Client& client, bool as_json);

/// @brief Prints the daemon's events as they happen, one line each (@p as_json: a JSON object
/// per line), until interrupted. A stream gpumemd ends (a restart) is subscribed again, saying
/// so on stderr.
/// @throws gpumem::Error when the stream cannot start, breaks otherwise, or gpumemd stays away
/// for 10 s.
void events(gpumem::Client& client, bool as_json);

}  // namespace gpumemctl
