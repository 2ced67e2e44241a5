// gpumemd: the per-node daemon that owns shareable memory pools.
//
// daemon/ is split by domain, each folder's main header saying what lives there and what it may
// include: config/ (the configuration), ledger/ (the one table of objects and clients),
// memory/ (pools, reservations and their book), sync/ (locks, barriers, channels and their
// book), books.hpp (the ledger and the domain books together), handlers/ (one handler per
// message, by domain), net/ (socket, sessions), systemd/ (notification, passed fds, watchdog),
// log/ (stderr or the journal).
// A request crosses
// proto -> net/session -> handlers -> one book -> one backend.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <vector>

#include "books.hpp"
#include "config/config.hpp"
#include "config/device_check.hpp"
#include "gpumem/proto/wire.hpp"
#include "gpumem/shared/version.hpp"
#include "log/logger.hpp"
#include "memory/pool_factory.hpp"
#ifdef GPUMEM_WITH_PROMETHEUS
#include "metrics/http_endpoint.hpp"
#endif
#include "net/server.hpp"
#include "net/worker_thread.hpp"
#include "restart/state_store.hpp"
#include "systemd/activation.hpp"

using namespace gpumem::daemon;

namespace {
/// What --version prints: the release, the wire protocol, and whether CUDA pools can be made.
std::string version_text() {
#ifdef GPUMEM_WITH_CUDA
  constexpr const char* cuda_backend = "built (the driver is loaded at run time)";
#else
  constexpr const char* cuda_backend = "not built (host pools only)";
#endif
  return fmt::format("gpumemd {}\nprotocol version {}\nCUDA backend: {}", gpumem::kVersion,
                     gpumem::proto::kProtocolVersion, cuda_backend);
}

/// The configuration file (or the embedded default) with the command line's overrides, which
/// pass through the same checks as the file's values. Read at start and again at each reload.
struct config_source {
  std::string path;  ///< empty: the embedded default
  std::string socket_path;
  std::string socket_mode;
  std::string log_level;

  std::string name() const { return path.empty() ? "the embedded default" : path; }

  daemon_config read() const {
    daemon_config config = path.empty() ? embedded_default_config() : load_config_file(path);
    if (!socket_path.empty()) set_key(config, "socket", socket_path, "--socket");
    if (!socket_mode.empty()) set_key(config, "socket_mode", socket_mode, "--socket-mode");
    if (!log_level.empty()) set_key(config, "log_level", log_level, "--log-level");
    return config;
  }
};

/// --check-config: the file's checks, then the devices it names against this machine's.
int check_config(const config_source& source, const daemon_config& config) {
  const std::vector<std::string> unchecked = check_devices(config, source.name());
  std::printf("configuration is valid: %zu pool(s)\n", config.pools.size());
  for (const std::string& line : config_notices(config)) std::printf("%s\n", line.c_str());
  for (const std::string& line : unchecked) std::printf("%s\n", line.c_str());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpumemd: shares GPU and host memory between processes"};
  config_source source;
  bool check_only = false;
  bool print_default = false;
  // Not CLI::ExistingFile: a missing file is a configuration error like any other (exit 2).
  app.add_option("-c,--config", source.path, "YAML configuration (default: embedded)");
  app.add_option("-s,--socket", source.socket_path, "socket path (default: $GPUMEM_SOCKET, ...)");
  app.add_option("--socket-mode", source.socket_mode,
                 "socket permissions in octal (default: 0600)");
  app.add_option("-l,--log-level", source.log_level,
                 "trace, debug, info, warn, error, critical, off");
  app.add_flag("--check-config", check_only,
               "validate the configuration and the CUDA devices it names, and exit");
  app.add_flag("--print-default-config", print_default,
               "print the default configuration as commented YAML and exit");
  app.set_version_flag("--version", version_text(), "print the version and exit");
  CLI11_PARSE(app, argc, argv);
  if (print_default) {
    std::fputs(default_config_yaml().c_str(), stdout);
    return 0;
  }

  // Replies go out with MSG_NOSIGNAL; this covers any other write to a closed pipe (a log on a
  // pipe whose reader went away), which must not kill the daemon and lose every client.
  std::signal(SIGPIPE, SIG_IGN);
  spdlog::set_default_logger(gpumem::daemon::log::make_daemon_logger());
  // Taken once, before anything else opens fds: the socket unit's listening socket
  // (FileDescriptorName=listen) and what the fd store kept of an earlier gpumemd.
  std::vector<systemd::passed_fd> passed = systemd::take_passed_fds();
  gpumem::unique_fd listen_socket;
  if (const auto listen = std::ranges::find(passed, "listen", &systemd::passed_fd::name);
      listen != passed.end()) {
    listen_socket = std::move(listen->fd);
    passed.erase(listen);
  }
  try {
    daemon_config config = source.read();
    spdlog::set_level(spdlog::level::from_str(config.log_level));
    if (check_only) return check_config(source, config);
    for (const std::string& notice : config_notices(config)) spdlog::warn("{}", notice);
    boost::asio::io_context io(1);
    config.pools = resolve_pools(config);
    // What the fd store kept of an earlier gpumemd is re-adopted; a state that cannot be read
    // means a clean start, never a crash loop.
    restart::state_store store(std::move(passed));
    std::unique_ptr<books> state;
    if (store.active()) {
      try {
        state = std::make_unique<books>(config, make_pool_maker(), make_reservation_maker(),
                                        make_signal_page_maker(),
                                        [&](books& adopting) { store.adopt(adopting); });
      } catch (const config_error&) {
        throw;
      } catch (const std::exception& error) {
        spdlog::error("re-adopting the previous gpumemd's state failed ({}): starting clean",
                      error.what());
      }
    }
    const bool readopted = state != nullptr;
    if (!state) {
      state = std::make_unique<books>(config, make_pool_maker(), make_reservation_maker(),
                                      make_signal_page_maker());
    }
    store.start(*state, readopted);
    // A worker of the folds' own: a fold with many objects takes a while, and neither it nor the
    // sleep and wake copies (the server's worker) should wait for the other. A fold changes no
    // books: nothing is written down after it.
    std::optional<worker_thread> state_folds;
    if (store.active()) store.fold_on(state_folds.emplace(io, [] {}));
    server listener(io, config, *state, std::move(listen_socket), [&source] {
      daemon_config reread = source.read();
      for (const std::string& notice : config_notices(reread)) spdlog::warn("{}", notice);
      reread.pools = resolve_pools(reread);
      return reread;
    });
    listener.watch_adopted(store.take_adopted_processes());
#ifdef GPUMEM_WITH_PROMETHEUS
    std::optional<metrics::http_endpoint> metrics_http;
    if (!config.metrics_listen.empty()) metrics_http.emplace(io, config.metrics_listen, *state);
#endif
    listener.run();
    store.stop_folding();
    return 0;
  } catch (const config_error& error) {
    spdlog::critical("configuration: {}", error.what());
    return 2;
  } catch (const std::exception& error) {
    spdlog::critical("{}", error.what());
    return 1;
  }
}
