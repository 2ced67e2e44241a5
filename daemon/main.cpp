// gpumemd: the per-node daemon that owns shareable memory pools.
//
// daemon/ is split by domain, each folder's main header saying what lives there and what it may
// include: config/ (the configuration), ledger/ (the one table of objects and clients),
// memory/ (pools, reservations and their book), sync/ (locks, barriers, channels and their
// book), books.hpp (the ledger and the domain books together), handlers/ (one handler per
// message, by domain), net/ (socket, sessions), systemd/ (notification, passed fds, watchdog).
// A request crosses
// proto -> net/session -> handlers -> one book -> one backend.
#include <spdlog/sinks/stdout_color_sinks.h>
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
#include "memory/pool_factory.hpp"
#ifdef GPUMEM_WITH_PROMETHEUS
#include "metrics/http_endpoint.hpp"
#endif
#include "net/server.hpp"
#include "restart/state_store.hpp"
#include "systemd/activation.hpp"

using namespace gpumem::daemon;

int main(int argc, char** argv) {
  CLI::App app{"gpumemd: shares GPU and host memory between processes"};
  std::string config_path;
  std::string socket_path;
  std::string socket_mode;
  std::string log_level;
  bool check_only = false;
  bool print_default = false;
  app.add_option("-c,--config", config_path, "YAML configuration (default: embedded)")
      ->check(CLI::ExistingFile);
  app.add_option("-s,--socket", socket_path, "socket path (default: $GPUMEM_SOCKET, ...)");
  app.add_option("--socket-mode", socket_mode, "socket permissions in octal (default: 0600)");
  app.add_option("-l,--log-level", log_level, "trace, debug, info, warn, error, critical, off");
  app.add_flag("--check-config", check_only, "validate the configuration and exit");
  app.add_flag("--print-default-config", print_default,
               "print the default configuration as commented YAML and exit");
  CLI11_PARSE(app, argc, argv);
  if (print_default) {
    std::fputs(default_config_yaml().c_str(), stdout);
    return 0;
  }

  // Replies go out with MSG_NOSIGNAL; this covers any other write to a closed pipe (a log on a
  // pipe whose reader went away), which must not kill the daemon and lose every client.
  std::signal(SIGPIPE, SIG_IGN);
  spdlog::set_default_logger(spdlog::stderr_color_mt("gpumemd"));
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
    daemon_config config =
        config_path.empty() ? embedded_default_config() : load_config_file(config_path);
    // The command line overrides the file, key by key, through the same checks.
    if (!socket_path.empty()) set_key(config, "socket", socket_path, "--socket");
    if (!socket_mode.empty()) set_key(config, "socket_mode", socket_mode, "--socket-mode");
    if (!log_level.empty()) set_key(config, "log_level", log_level, "--log-level");
    spdlog::set_level(spdlog::level::from_str(config.log_level));
    if (check_only) {
      std::printf("configuration is valid: %zu pool(s)\n", config.pools.size());
      return 0;
    }
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
    server listener(io, config, *state, std::move(listen_socket));
    listener.watch_adopted(store.take_adopted_processes());
#ifdef GPUMEM_WITH_PROMETHEUS
    std::optional<metrics::http_endpoint> metrics_http;
    if (!config.metrics_listen.empty()) metrics_http.emplace(io, config.metrics_listen, *state);
#endif
    listener.run();
    return 0;
  } catch (const config_error& error) {
    spdlog::critical("configuration: {}", error.what());
    return 2;
  } catch (const std::exception& error) {
    spdlog::critical("{}", error.what());
    return 1;
  }
}
