#include "net/server.hpp"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

#include "config/reload_plan.hpp"
#include "gpumem/shared/socket_path.hpp"
#include "net/peer_process.hpp"
#include "request_error.hpp"
#include "systemd/notify.hpp"
#include "systemd/watchdog.hpp"

namespace gpumem::daemon {

namespace asio = boost::asio;
using stream = asio::local::stream_protocol;

namespace {
constexpr int kListenBacklog = 512;
/// How soon a lock clean-up that found a hand-off in flight is tried again.
constexpr auto kSettleInterval = std::chrono::milliseconds(10);
/// How long accepting pauses when the process or the system is out of descriptors or memory:
/// the pending connection stays in the backlog, and retrying at once would only spin.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
/// At most one line per interval about refused or failed connections.
constexpr auto kAcceptLogInterval = std::chrono::seconds(10);

bool out_of_resources(const boost::system::error_code& error) {
  return error == boost::system::errc::too_many_files_open ||
         error == boost::system::errc::too_many_files_open_in_system ||
         error == boost::system::errc::no_buffer_space ||
         error == boost::system::errc::not_enough_memory;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("socket " + path + ": " + what);
}

bool someone_answers(const std::string& path) {
  asio::io_context probe;
  stream::socket socket(probe);
  boost::system::error_code error;
  socket.connect(stream::endpoint(path), error);
  return !error;
}

void prepare_folder(const std::string& path) {
  // Each folder it makes is made 0700, from the first missing one down, never readable by
  // others in between: a per-user folder under /tmp must not be. The system folder is made by
  // systemd (RuntimeDirectory=) with the operator's mode.
  std::vector<std::filesystem::path> missing;
  std::error_code error;
  for (auto folder = std::filesystem::path(path).parent_path();
       !folder.empty() && folder != folder.root_path() && !std::filesystem::exists(folder, error);
       folder = folder.parent_path()) {
    missing.push_back(folder);
  }
  for (auto each = missing.rbegin(); each != missing.rend(); ++each) {
    if (::mkdir(each->c_str(), 0700) == 0) {
      ::chmod(each->c_str(), 0700);  // made no wider than 0700; exactly that whatever the umask
    } else if (errno != EEXIST) {
      fail(path, "cannot create folder " + each->string() + ": " + std::strerror(errno));
    }
  }
  // Whoever owns or may write to the folder could replace the socket and pose as gpumemd.
  if (const std::string problem = unsafe_socket_folder(path, ::geteuid()); !problem.empty()) {
    fail(path, problem);
  }
}
}  // namespace

server::server(asio::io_context& io, daemon_config& config, books& state, unique_fd passed_listener,
               config_reader reread)
    : io_(io),
      config_(config),
      reread_(std::move(reread)),
      books_(state),
      handler_(state),
      socket_path_(config.socket_path.empty() ? default_daemon_socket_path() : config.socket_path),
      acceptor_(io),
      signals_(io, SIGINT, SIGTERM, SIGQUIT),
      settle_timer_(io),
      watchdog_timer_(io),
      accept_pause_(io),
      accept_log_(kAcceptLogInterval),
      refusal_log_(kAcceptLogInterval),
      refusal_(io),
      poller_(io),
      adopted_(io, state, [this] { settle_pending(); }),
      worker_(io, [this] { books_.write_changes(); }) {
  books_.reservations.set_background(&worker_);
  books_.reservations.keep_sleep_memory(config.sleep_memory_kept);
  signals_.add(SIGHUP);
  signals_.add(SIGUSR1);
  if (passed_listener) {
    adopt_socket(std::move(passed_listener));
  } else {
    bind_socket(config);
  }
}

void server::bind_socket(const daemon_config& config) {
  if (socket_path_.size() >= sizeof(sockaddr_un::sun_path)) {
    fail(socket_path_, "path longer than the " + std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                           " bytes a Unix socket address holds");
  }
  prepare_folder(socket_path_);
  struct stat existing {};
  if (::lstat(socket_path_.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) fail(socket_path_, "exists and is not a socket");
    if (someone_answers(socket_path_)) fail(socket_path_, "another gpumemd is listening on it");
    ::unlink(socket_path_.c_str());
  }
  acceptor_.open(stream());
  // bind creates the socket file; the umask gives it the configured mode from the first instant.
  const mode_t previous = ::umask(static_cast<mode_t>(~config.socket_mode & 0777));
  boost::system::error_code error;
  acceptor_.bind(stream::endpoint(socket_path_), error);
  ::umask(previous);
  if (error) fail(socket_path_, error.message());
  acceptor_.listen(kListenBacklog);
}

void server::adopt_socket(unique_fd listener) {
  const std::string which =
      "the socket passed by systemd (fd " + std::to_string(listener.get()) + ")";
  const auto option = [&listener](int name) {
    int value = -1;
    socklen_t size = sizeof value;
    return ::getsockopt(listener.get(), SOL_SOCKET, name, &value, &size) == 0 ? value : -1;
  };
  if (option(SO_DOMAIN) != AF_UNIX || option(SO_TYPE) != SOCK_STREAM ||
      option(SO_ACCEPTCONN) != 1) {
    throw std::runtime_error(which +
                             " is not a listening Unix stream socket: gpumemd.socket must say "
                             "ListenStream=/path/of/the/socket and FileDescriptorName=listen");
  }
  sockaddr_un address{};
  socklen_t size = sizeof address;
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &size) == 0 &&
      size > offsetof(sockaddr_un, sun_path)) {
    const std::size_t length = size - offsetof(sockaddr_un, sun_path);
    std::string bound(address.sun_path, length);
    if (bound.front() == '\0') {
      bound.front() = '@';  // an abstract name, written as systemd writes it
    } else {
      bound.resize(bound.find('\0') == std::string::npos ? bound.size() : bound.find('\0'));
    }
    if (bound != socket_path_) {
      spdlog::warn("the socket passed by systemd is {}, not the configured {}: serving on {}",
                   bound, socket_path_, bound);
    }
    socket_path_ = std::move(bound);
  }
  boost::system::error_code error;
  acceptor_.assign(stream(), listener.get(), error);
  if (error) throw std::runtime_error(which + ": " + error.message());
  listener.release();  // the acceptor owns it now
  owns_socket_file_ = false;
  spdlog::info(
      "serving on {}, the socket passed by systemd (socket activation): clients wait "
      "in its backlog while gpumemd restarts",
      socket_path_);
}

server::~server() {
  books_.reservations.set_background(nullptr);
  if (owns_socket_file_ && acceptor_.is_open()) ::unlink(socket_path_.c_str());
}

void server::run() {
  wait_for_signal();
  asio::co_spawn(io_, accept_loop(), asio::detached);
  // Clean-ups and lock turns re-adopted from a previous daemon, or left by clients that died
  // while none ran, go on without waiting for a session to end.
  settle_pending();
  if (const auto interval = systemd::watchdog_interval()) {
    spdlog::info("systemd watchdog: {} ms, pinging every {} ms", interval->count() / 1000,
                 interval->count() / 2000);
    asio::co_spawn(io_, watchdog_loop(*interval), asio::detached);
  }
  spdlog::info("gpumemd {} listening on {} with {} pool(s)", ::getpid(), socket_path_,
               books_.memory.pool_count());
  systemd::notify("READY=1\nSTATUS=accepting clients");
  poller_.run();
}

void server::wait_for_signal() {
  signals_.async_wait([this](const boost::system::error_code& error, int signal) {
    if (!error) on_signal(signal);
  });
}

void server::on_signal(int signal) {
  switch (signal) {
    case SIGHUP:
      reload();
      break;
    case SIGUSR1:
      log_stats();
      break;
    default:
      shut_down(signal == SIGINT ? "SIGINT" : signal == SIGQUIT ? "SIGQUIT" : "SIGTERM");
      return;
  }
  wait_for_signal();
}

void server::log_stats() const {
  const proto::stats_reply stats = books_.stats();
  std::string pools;
  for (const auto& pool : stats.records) {
    pools += fmt::format(", pool {} {} of {} bytes in use", pool.name.view(), pool.bytes_in_use,
                         pool.size_limit);
  }
  spdlog::info("SIGUSR1: {} connection(s), {} client(s), {} allocation(s){}, up {} s",
               sessions_.size(), stats.head.client_count, stats.head.allocation_count, pools,
               stats.head.uptime_ms / 1000);
}

void server::reload() {
  // systemd 253 and later keep the unit "reloading" until READY=1; MONOTONIC_USEC tells it
  // which SIGHUP this answers. Older ones ignore both lines.
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  systemd::notify(
      fmt::format("RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the configuration",
                  std::uint64_t(now.tv_sec) * 1000000 + std::uint64_t(now.tv_nsec) / 1000));
  try {
    if (!reread_) throw config_error("this gpumemd cannot read its configuration again");
    reload_plan plan = plan_reload(config_, reread_());
    // Before the pools: a new pool's first instance is held to the new store size.
    books_.descriptors.configure(plan.next.fd_store_max, plan.next.max_connections);
    for (const pool_config& pool : plan.new_pools) {
      try {
        books_.memory.add_pool(pool);
        plan.changes.push_back(fmt::format("pool '{}' added", pool.name));
      } catch (const config_error& error) {
        std::erase(plan.next.pools, pool);
        plan.not_applied.push_back(fmt::format("pools: {}; not added", error.what()));
      }
    }
    spdlog::set_level(spdlog::level::from_str(plan.next.log_level));
    if (plan.next.socket_mode != config_.socket_mode && !apply_socket_mode(plan.next.socket_mode)) {
      std::erase_if(plan.changes,
                    [](const std::string& change) { return change.starts_with("socket_mode "); });
      plan.next.socket_mode = config_.socket_mode;
    }
    // New requests meet the new rules; what exists stays (a client over a lowered quota keeps
    // what it owns and is refused more). The socket is made by this process: its group is ours.
    books_.access = access_policy(plan.next.access, ::geteuid(), ::getegid());
    books_.quotas = quota_policy(plan.next.quotas);
    books_.reservations.keep_sleep_memory(plan.next.sleep_memory_kept);
    config_ = std::move(plan.next);
    for (const std::string& each : plan.not_applied) spdlog::warn("reload: {}", each);
    spdlog::info("SIGHUP: configuration reloaded: {}",
                 plan.changes.empty() ? "nothing changed"
                                      : fmt::format("{}", fmt::join(plan.changes, ", ")));
  } catch (const config_error& error) {
    spdlog::error("SIGHUP: configuration not reloaded, the previous one stays in force: {}",
                  error.what());
  }
  systemd::notify("READY=1\nSTATUS=accepting clients");
}

bool server::apply_socket_mode(mode_t mode) {
  if (!owns_socket_file_) {
    spdlog::warn(
        "reload: socket_mode: the socket {} was made by systemd's socket unit, whose SocketMode= "
        "sets its mode; not changed",
        socket_path_);
  } else if (socket_path_.starts_with('@')) {
    spdlog::warn("reload: socket_mode: {} is an abstract socket, which has no mode; not changed",
                 socket_path_);
  } else if (::chmod(socket_path_.c_str(), mode) != 0) {
    spdlog::warn("reload: socket_mode: chmod {}: {}; not changed", socket_path_,
                 std::strerror(errno));
  } else {
    return true;
  }
  return false;
}

asio::awaitable<void> server::accept_loop() {
  while (acceptor_.is_open()) {
    boost::system::error_code error;
    stream::socket socket =
        co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, error));
    if (error == asio::error::operation_aborted) break;
    if (out_of_resources(error)) {
      // Keep serving the clients we have; those waiting stay in the backlog until a
      // descriptor comes free.
      accept_log_.warn("accept failed: {}; pausing accepts for {} ms", error.message(),
                       kAcceptPause.count());
      accept_pause_.expires_after(kAcceptPause);
      co_await accept_pause_.async_wait(asio::redirect_error(asio::use_awaitable, error));
      continue;
    }
    if (error) {
      accept_log_.warn("accept failed: {}", error.message());
      continue;
    }
    try {
      admit(std::move(socket));
    } catch (const std::exception& failure) {
      // Out of this coroutine, it would end it (co_spawn with detached drops the exception)
      // and gpumemd would accept no connection again: this one closes instead.
      accept_log_.warn("could not admit a connection: {}", failure.what());
    }
  }
}

void server::admit(stream::socket socket) {
  // The connection rules and the uid's connection quota are the hello's to check too, but a
  // connection counts from here: one that never says hello would otherwise escape them, and
  // a uid that may not connect at all could fill max_connections for everyone.
  const credentials who = peer_credentials(socket.native_handle());
  try {
    books_.check_new_connection(who);
  } catch (const request_error& refused) {
    refusal_log_.warn("refusing a connection of uid {}: {}", who.uid, refused.what());
    books_.publish_refused(0, who, {}, static_cast<std::uint16_t>(proto::message_type::hello),
                           refused);
    books_.requests.record_error(static_cast<std::uint32_t>(refused.code()));
    refusal_.refuse(std::move(socket), who.uid, refused.code(), refused.what());
    return;
  }
  if (sessions_.size() >= config_.max_connections) {
    refusal_log_.warn("{} connections are open (max_connections): refusing a new one",
                      sessions_.size());
    refusal_.refuse(std::move(socket), who.uid, proto::errc::quota_exceeded,
                    fmt::format("gpumemd serves at most {} connections at once (max_connections) "
                                "and has that many open: try again later",
                                config_.max_connections));
    return;
  }
  // The session's socket leaves Asio's reactor for the poller's epoll set.
  boost::system::error_code error;
  unique_fd released(socket.release(error));
  if (error) {
    accept_log_.warn("could not take over a connection: {}", error.message());
    return;
  }
  auto client = std::make_shared<session>(std::move(released), poller_, books_, handler_, config_,
                                          [this](session& ended) {
                                            sessions_.erase(&ended);
                                            settle_pending();
                                          });
  sessions_.emplace(client.get(), client);
  try {
    client->start();
  } catch (const std::exception& failure) {
    accept_log_.warn("could not start a session: {}", failure.what());
    client->stop("could not be set up");
  }
}

asio::awaitable<void> server::watchdog_loop(std::chrono::microseconds interval) {
  // Pinged from the loop that serves clients: if it wedges, the pings stop and systemd
  // restarts the daemon.
  for (;;) {
    systemd::notify("WATCHDOG=1");
    watchdog_timer_.expires_after(interval / 2);
    boost::system::error_code error;
    co_await watchdog_timer_.async_wait(asio::redirect_error(asio::use_awaitable, error));
    if (error) break;
  }
}

void server::settle_pending() {
  if (settling_ || !books_.sync.has_pending() || !acceptor_.is_open()) return;
  settling_ = true;
  asio::co_spawn(io_, settle_loop(), asio::detached);
}

asio::awaitable<void> server::settle_loop() {
  for (;;) {
    settle_timer_.expires_after(kSettleInterval);
    boost::system::error_code error;
    co_await settle_timer_.async_wait(asio::redirect_error(asio::use_awaitable, error));
    if (error) break;
    const bool settled = books_.sync.settle();
    // What the round changed (a hand-off finished, a cell found corrupt) is written down now,
    // not with the next request, which may be long in coming.
    books_.write_changes();
    if (settled) break;
  }
  settling_ = false;
}

void server::shut_down(const char* why) {
  spdlog::info("{}: shutting down, {} client(s) connected", why, sessions_.size());
  systemd::notify("STOPPING=1");
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  settle_timer_.cancel();
  watchdog_timer_.cancel();
  accept_pause_.cancel();
  if (owns_socket_file_) ::unlink(socket_path_.c_str());
  // Nothing a live client maps is freed or zeroed: its process keeps its mappings, and a
  // daemon restarted with the fd store re-adopts the rest, as after a crash.
  for (const auto& [key, each] : sessions_) each->abandon();
  sessions_.clear();
  io_.stop();
}

}  // namespace gpumem::daemon
