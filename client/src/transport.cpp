#include "transport.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "gpumem/shared/fd_passing.hpp"
#include "gpumem/shared/socket_path.hpp"
#include "gpumem/shared/sync/futex.hpp"

extern char* program_invocation_short_name;

namespace gpumem::detail {

using proto::message_type;

namespace {
// Bumped in every child at fork(): lets a transport notice it crossed a fork without a
// getpid() system call on every request.
std::atomic<std::uint64_t> fork_generation{0};
const bool fork_watch_installed = [] {
  ::pthread_atfork(nullptr, nullptr, [] { ++fork_generation; });
  return true;
}();

[[noreturn]] void throw_io(const std::string& what, const std::error_code& error) {
  throw Error(errc::io_error, what + ": " + error.message());
}

// Keeps the label within the wire alphabet so a program name never fails the handshake.
proto::wire_name label_for(const std::string& wanted) {
  std::string text = wanted.empty() ? program_invocation_short_name : wanted;
  text.resize(std::min(text.size(), proto::kMaxNameLength));
  for (char& c : text) {
    proto::wire_name probe{};
    if (proto::make_wire_name(std::string_view(&c, 1), probe)) c = '_';
  }
  proto::wire_name label{};
  (void)proto::make_wire_name(text, label);
  return label;
}

constexpr auto kDefaultTimeout = std::chrono::seconds(60);
constexpr auto kDefaultReconnectFor = std::chrono::seconds(10);
/// How often a connect to a daemon whose backlog is full is tried again.
constexpr auto kConnectRetryInterval = std::chrono::milliseconds(5);
/// The pauses between reconnects double from the first to the longest: a restart that takes
/// milliseconds costs about that, a long one costs the daemon a connect twice a second.
constexpr auto kFirstReconnectPause = std::chrono::milliseconds(10);
constexpr auto kLongestReconnectPause = std::chrono::milliseconds(500);

/// @brief The whole number in the environment variable @p name.
/// @return nullopt when it is unset or empty.
/// @throws Error(invalid_argument) naming the variable, its text and @p meaning (what it should
/// be) when it is not a number from @p least to @p most.
std::optional<long long> number_from_env(const char* name, long long least, long long most,
                                         const char* meaning) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || errno == ERANGE || value < least || value > most) {
    throw Error(errc::invalid_argument,
                std::string("$") + name + " is '" + text + "', not " + meaning);
  }
  return value;
}

/// The longest timeout the environment or the options may give: a deadline that far ahead still
/// fits the clock's nanoseconds (about 292 years) many times over.
constexpr long long kLongestMilliseconds = 1'000'000'000'000;  // about 31 years

/// The milliseconds in the environment variable @p name; nullopt when it is unset or empty.
std::optional<std::chrono::milliseconds> milliseconds_from_env(const char* name,
                                                               bool zero_allowed) {
  const auto milliseconds =
      number_from_env(name, zero_allowed ? 0 : 1, kLongestMilliseconds,
                      zero_allowed ? "a number of milliseconds from 0 (never) to 10^12"
                                   : "a number of milliseconds from 1 to 10^12");
  if (!milliseconds) return std::nullopt;
  return std::chrono::milliseconds(*milliseconds);
}

/// While a call waits in the mailbox, how often the socket is checked for the daemon's end: at
/// first soon (a daemon that died before the ring costs little), then seldom.
constexpr auto kFirstHangUpCheck = std::chrono::milliseconds(1);
constexpr auto kLongestHangUpCheck = std::chrono::milliseconds(16);

/// The most $GPUMEM_ANSWER_SPIN_US may ask: at most the first hang-up check, so that a spin skips
/// none. Nor does it outlast the deadline, since a timeout is at least a millisecond.
constexpr auto kLongestAnswerSpin = std::chrono::microseconds(1000);
static_assert(kLongestAnswerSpin <= kFirstHangUpCheck);

/// The longest a call spins for its answer in the mailbox before it sleeps on the futex:
/// $GPUMEM_ANSWER_SPIN_US, none unless set. Asleep, a call pays the futex wake-up after the
/// daemon answers and the daemon pays for waking it, about half of a round trip on a GPU host
/// (answer_spin_bench). Within the most, the budget is learnt per client (sync::spin_budget,
/// from zero), so calls that keep outlasting it mostly stop spinning; a long most keeps spinning
/// where answers are slow (50 us: 3.5-4 times the client CPU per call with as many busy clients
/// as cores), which is why a process spins only when asked. (The short spin once the daemon has
/// marked a call as being handled is another matter: request_mailbox::kSpinWhileAnswering.)
std::chrono::microseconds answer_spin_from_env() {
  return std::chrono::microseconds(
      number_from_env("GPUMEM_ANSWER_SPIN_US", 0, kLongestAnswerSpin.count(),
                      "a number of microseconds from 0 (never spin, the default) to 1000")
          .value_or(0));
}

bool mailbox_from_env() {
  const char* text = std::getenv("GPUMEM_MAILBOX");
  if (text == nullptr || *text == '\0' || std::strcmp(text, "1") == 0) return true;
  if (std::strcmp(text, "0") == 0) return false;
  throw Error(errc::invalid_argument, std::string("$GPUMEM_MAILBOX is '") + text +
                                          "', not 1 (requests through shared memory where the "
                                          "daemon offers it) or 0 (on the socket only)");
}

/// @throws Error(invalid_argument) naming @p option when @p configured is longer than the
/// environment may give (kLongestMilliseconds): its deadline would overflow the clock.
void check_not_too_long(std::chrono::milliseconds configured, const char* option) {
  if (configured.count() > kLongestMilliseconds) {
    throw Error(errc::invalid_argument, std::string("ConnectOptions::") + option + " is " +
                                            std::to_string(configured.count()) +
                                            " ms, more than the most, 10^12 ms");
  }
}

std::chrono::milliseconds timeout_from(std::chrono::milliseconds configured) {
  check_not_too_long(configured, "timeout");
  if (configured.count() > 0) return configured;
  return milliseconds_from_env("GPUMEM_TIMEOUT_MS", false).value_or(kDefaultTimeout);
}

std::chrono::milliseconds reconnect_from(std::optional<std::chrono::milliseconds> configured) {
  if (!configured) {
    return milliseconds_from_env("GPUMEM_RECONNECT_MS", true).value_or(kDefaultReconnectFor);
  }
  if (configured->count() < 0) {
    throw Error(errc::invalid_argument, "ConnectOptions::reconnect_for is negative");
  }
  check_not_too_long(*configured, "reconnect_for");
  return *configured;
}

uid_t listener_uid(int socket, const std::string& path) {
  ucred peer{};
  socklen_t size = sizeof peer;
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    throw_io("SO_PEERCRED on " + path, {errno, std::system_category()});
  }
  return peer.uid;
}

std::vector<uid_t> trusted_uids(std::int64_t configured) {
  try {
    return trusted_daemon_uids(configured);
  } catch (const std::invalid_argument& error) {
    throw Error(errc::invalid_argument, error.what());
  }
}

// The socket file and its folder say who set the socket up; the listening process's
// credentials say who answers, whatever happened to the file since.
void check_listener(int socket, const std::string& path, std::span<const uid_t> trusted) {
  const uid_t listening = listener_uid(socket, path);
  if (std::ranges::find(trusted, listening) == trusted.end()) {
    throw Error(errc::permission_denied,
                "refusing the gpumemd socket " + path + ": the process listening on it runs as " +
                    describe_uids(std::span(&listening, 1)) + ", and gpumemd must run as " +
                    describe_uids(trusted) + " (set $" + kDaemonUidEnv +
                    " or the daemon_uid connect option when gpumemd runs as another user)");
  }
}

unique_fd connect_to(const std::string& path, std::span<const uid_t> trusted,
                     std::chrono::steady_clock::time_point deadline) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    throw Error(errc::invalid_argument, "socket path too long: " + path);
  }
  // The address would end at it: another socket than the one named.
  if (const auto nul = path.find('\0'); nul != std::string::npos) {
    throw Error(errc::invalid_argument, "socket path '" + path.substr(0, nul) +
                                            "\\0...' has a NUL byte at " + std::to_string(nul));
  }
  if (const std::string problem = untrusted_socket(path, trusted); !problem.empty()) {
    throw Error(errc::permission_denied, problem);
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  // Non-blocking: a Unix socket's connect would otherwise wait without limit while the
  // daemon's backlog is full.
  unique_fd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!socket) throw_io("socket", {errno, std::system_category()});
  for (;;) {
    if (::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EACCES || errno == EPERM) {
      throw Error(errc::permission_denied,
                  "may not connect to gpumemd at " + path +
                      " (the permissions of the socket or its folder leave this user out): " +
                      std::system_category().message(errno));
    }
    if (errno != EAGAIN) {
      throw_io(
          "cannot reach gpumemd at " + path + " (is it running? set GPUMEM_SOCKET to its socket)",
          {errno, std::system_category()});
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(errc::timed_out, "gpumemd at " + path + " did not accept the connection in time");
    }
    std::this_thread::sleep_for(kConnectRetryInterval);
  }
  check_listener(socket.get(), path, trusted);
  return socket;
}
}  // namespace

transport::transport(const ConnectOptions& options)
    : path_(options.socket_path.empty() ? default_client_socket_path() : options.socket_path),
      trusted_(trusted_uids(options.daemon_uid)),
      label_(label_for(options.label)),
      timeout_(timeout_from(options.timeout)),
      reconnect_for_(reconnect_from(options.reconnect_for)),
      mailbox_wanted_(mailbox_from_env()),
      answer_spin_(std::chrono::nanoseconds(0), answer_spin_from_env()),
      owner_pid_(::getpid()),
      fork_generation_(fork_generation.load()) {
  (void)fork_watch_installed;
  in_.resize(sizeof(proto::header) + proto::kMaxPayloadSize);
  std::string broke;
  if (!greet(broke)) {
    throw Error(errc::connection_closed,
                "gpumemd at " + path_ + " closed the connection: " + broke);
  }
}

std::pair<unique_fd, std::uint32_t> transport::hand_over() {
  const std::lock_guard lock(mutex_);
  check_owner_process();
  check_session();
  if (!socket_) {
    throw Error(errc::connection_closed, "the connection to gpumemd at " + path_ + " broke");
  }
  lost_ = "this connection to gpumemd at " + path_ + " streams events now";
  mailbox_.reset();
  return {std::move(socket_), ++last_request_id_};
}

bool transport::in_owner_process() const noexcept {
  return fork_generation.load(std::memory_order_relaxed) == fork_generation_;
}

void transport::check_owner_process() const {
  if (!in_owner_process()) {
    throw Error(errc::invalid_argument, "this gpumem client was connected by process " +
                                            std::to_string(owner_pid_) +
                                            "; a forked child must connect its own");
  }
}

void transport::check_in_step() const {
  if (timed_out_) {
    throw Error(errc::timed_out, "an earlier request to gpumemd at " + path_ +
                                     " timed out, so this connection is out of step: connect "
                                     "again");
  }
}

void transport::check_session() const {
  if (!lost_.empty()) throw Error(errc::session_lost, lost_);
}

transport::~transport() {
  if (mailbox_ && in_owner_process()) mailbox_->say_closing();
}

void transport::drop_connection() noexcept {
  mailbox_.reset();
  socket_.reset();
}

void transport::lose_session(const std::string& why) {
  drop_connection();
  lost_ = "gpumemd at " + path_ + " restarted without this session's state (" + why +
          "), so the objects of this session are gone (memory already mapped stays usable): "
          "connect again";
  throw Error(errc::session_lost, lost_);
}

void transport::wait_for(short events, clock::time_point deadline, const char* doing) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
    pollfd ready{socket_.get(), events, 0};
    const int result = left > 0 ? ::poll(&ready, 1, static_cast<int>(left)) : 0;
    if (result > 0) return;  // ready, or an error or hang-up the next call reports
    if (result < 0 && errno == EINTR) continue;
    if (result < 0) throw_io("poll", {errno, std::system_category()});
    time_out(doing);
  }
}

void transport::time_out(const char* doing) {
  timed_out_ = true;
  throw Error(errc::timed_out, std::string("gpumemd at ") + path_ + " did not " + doing +
                                   " within " + std::to_string(timeout_.count()) +
                                   " ms (ConnectOptions::timeout, $GPUMEM_TIMEOUT_MS)");
}

bool transport::hung_up() const noexcept {
  pollfd watched{socket_.get(), POLLIN | POLLRDHUP, 0};
  return ::poll(&watched, 1, 0) > 0 && (watched.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
}

bool transport::greet(std::string& broke) {
  socket_ = connect_to(path_, trusted_, clock::now() + timeout_);
  const uid_t answering = listener_uid(socket_.get(), path_);
  const bool resuming = client_id_ != 0;
  std::vector<std::byte> frame;
  proto::append_frame(
      frame, static_cast<std::uint16_t>(message_type::hello), ++last_request_id_,
      proto::hello_request{proto::kProtocolVersion, static_cast<std::uint32_t>(owner_pid_), label_,
                           client_id_, token_});
  std::vector<unique_fd> fds;
  const auto answer = round_trip(frame, fds, broke);
  if (!answer) return false;
  proto::hello_reply reply{};
  try {
    check_reply(*answer, message_type::hello, fds);
    if (auto error = proto::decode_payload(answer->payload, reply)) {
      throw Error(errc::bad_message, "gpumemd sent a malformed hello reply: " + error.message());
    }
  } catch (const Error& refusal) {
    drop_connection();
    if (resuming && refusal.status() == errc::session_lost) lose_session(refusal.what());
    throw;
  }
  // Pool, page and object ids are the daemon instance's: another instance's would name other
  // memory under the same numbers.
  if (resuming && (reply.daemon_instance != daemon_instance_ || reply.client_id != client_id_ ||
                   answering != daemon_uid_)) {
    lose_session("another gpumemd instance answers there now");
  }
  client_id_ = reply.client_id;
  token_ = reply.token;
  daemon_instance_ = reply.daemon_instance;
  daemon_uid_ = answering;
  daemon_features_.store(reply.features, std::memory_order_relaxed);
  greetings_.fetch_add(1, std::memory_order_relaxed);
  return open_mailbox(broke);
}

bool transport::open_mailbox(std::string& broke) {
  mailbox_.reset();
  if (!mailbox_wanted_ || (daemon_features() & proto::kFeatureMailbox) == 0) return true;
  std::vector<std::byte> frame;
  proto::append_frame(frame, static_cast<std::uint16_t>(message_type::open_mailbox),
                      ++last_request_id_, proto::empty_payload{});
  std::vector<unique_fd> fds;
  const auto answer = round_trip(frame, fds, broke);
  if (!answer) return false;
  try {
    check_reply(*answer, message_type::open_mailbox, fds);
    proto::mailbox_reply reply{};
    if (auto error = proto::decode_payload(answer->payload, reply)) {
      throw Error(errc::bad_message, "gpumemd sent a malformed open_mailbox reply");
    }
    mailbox_.emplace(std::move(fds[0]), std::move(fds[1]));
  } catch (const Error&) {
    // A daemon that cannot make one (out of descriptors, say) still answers on the socket.
  }
  return true;
}

void transport::reconnect(clock::time_point give_up, std::string broke) {
  const bool one_try = gave_up_;
  auto pause = kFirstReconnectPause;
  for (;;) {
    try {
      if (greet(broke)) {
        gave_up_ = false;
        return;
      }
    } catch (const Error& error) {
      // Nobody listening, or the socket gone: the daemon is still away; or a daemon back from a
      // restart that new clients filled up to max_connections before this one came back.
      // Anything else (an untrusted socket, a refusal, a timeout) is the call's answer.
      if (error.status() != errc::io_error && error.status() != errc::quota_exceeded) throw;
      broke = error.what();
    }
    drop_connection();
    const auto now = clock::now();
    if (now >= give_up) {
      gave_up_ = true;
      const std::string tried =
          one_try ? "stayed away for the " + std::to_string(reconnect_for_.count()) +
                        " ms an earlier call tried to reconnect, and is still away"
                  : "did not come back within " + std::to_string(reconnect_for_.count()) +
                        " ms of reconnecting";
      throw Error(errc::io_error,
                  "the connection to gpumemd at " + path_ + " broke, and gpumemd " + tried +
                      " (ConnectOptions::reconnect_for, $GPUMEM_RECONNECT_MS): " + broke);
    }
    std::this_thread::sleep_for(std::min<clock::duration>(pause, give_up - now));
    pause = std::min(pause * 2, kLongestReconnectPause);
  }
}

proto::frame_view transport::exchange(message_type type, std::vector<unique_fd>& fds) {
  check_owner_process();
  check_in_step();
  check_session();
  std::optional<clock::time_point> give_up;
  for (;;) {
    std::string broke = "it broke during an earlier call";
    if (socket_) {
      const bool by_mailbox =
          mailbox_ &&
          proto::mailbox_may_carry(*proto::find_request(static_cast<std::uint16_t>(type)));
      fds.clear();
      if (const auto frame =
              by_mailbox ? mailbox_round_trip(out_, broke) : round_trip(out_, fds, broke)) {
        check_reply(*frame, type, fds);
        return *frame;
      }
      drop_connection();
    }
    if (reconnect_for_.count() == 0) {
      throw Error(errc::io_error, "the connection to gpumemd at " + path_ + " broke (" + broke +
                                      "), and reconnecting is off (ConnectOptions::reconnect_for, "
                                      "$GPUMEM_RECONNECT_MS)");
    }
    if (!give_up) give_up = clock::now() + (gave_up_ ? clock::duration{} : reconnect_for_);
    // The session is resumed on the new connection, and the request goes again with its id:
    // the daemon answers it from its records if it was carried out before the break.
    reconnect(*give_up, broke);
  }
}

std::optional<proto::frame_view> transport::round_trip(std::span<const std::byte> request,
                                                       std::vector<unique_fd>& fds,
                                                       std::string& broke) {
  proto::header head{};
  std::memcpy(&head, request.data(), sizeof head);
  const auto deadline = clock::now() + timeout_;
  std::size_t sent = 0;
  while (sent < request.size()) {
    std::error_code error;
    sent += send_with_fds(socket_.get(), request.subspan(sent), {}, error);
    if (error == std::errc::resource_unavailable_try_again) {
      wait_for(POLLOUT, deadline, "take the request");
    } else if (error == std::errc::broken_pipe || error == std::errc::connection_reset) {
      broke = "sending: " + error.message();
      return std::nullopt;
    } else if (error) {
      throw_io("sending to gpumemd at " + path_, error);
    }
  }
  fds.clear();
  std::size_t filled = 0;
  proto::frame_view frame;
  for (;;) {
    wait_for(POLLIN, deadline, "answer");
    std::error_code error;
    const std::size_t received =
        recv_with_fds(socket_.get(), std::span(in_).subspan(filled), fds, error);
    if (error == std::errc::resource_unavailable_try_again) continue;
    if (error == std::errc::connection_reset || (!error && received == 0)) {
      broke = error ? "receiving: " + error.message() : "gpumemd closed the connection";
      return std::nullopt;
    }
    if (error) {
      throw Error(error == std::errc::protocol_error ? errc::unexpected_handle : errc::io_error,
                  "receiving from gpumemd: " + error.message());
    }
    filled += received;
    const auto status = proto::parse_frame(std::span(in_).first(filled), frame, error);
    if (status == proto::parse_status::invalid) {
      throw Error(errc::bad_message, "gpumemd sent a bad frame: " + error.message());
    }
    if (status == proto::parse_status::complete) break;
  }
  // Only one request is ever outstanding, so anything beyond the frame is a broken peer.
  if (frame.frame_size() != filled || frame.head.request_id != head.request_id) {
    throw Error(errc::bad_message, "gpumemd's reply does not match the request");
  }
  return frame;
}

std::optional<proto::frame_view> transport::mailbox_round_trip(std::span<const std::byte> request,
                                                               std::string& broke) {
  proto::header head{};
  std::memcpy(&head, request.data(), sizeof head);
  const auto start = clock::now();
  const auto deadline = start + timeout_;
  mailbox_->post(request);
  auto check_interval = std::chrono::duration_cast<clock::duration>(kFirstHangUpCheck);
  auto next_check = start + check_interval;
  const auto spin_until = start + answer_spin_.now();
  bool slept = false;
  std::optional<std::size_t> size;
  for (unsigned spins = 0; !(size = mailbox_->take_answer(in_)); ++spins) {
    const auto now = clock::now();
    if (now < spin_until) {
      sync::spin_turn(spins);
      continue;
    }
    if (now >= next_check) {
      if (hung_up()) {
        // The daemon may have answered just before it hung up (a refusal that ends the
        // session): an answer that came is the call's, and the call must not go again.
        if ((size = mailbox_->take_answer(in_))) break;
        broke = "gpumemd closed the connection";
        return std::nullopt;
      }
      check_interval = std::min<clock::duration>(check_interval * 2, kLongestHangUpCheck);
      next_check = now + check_interval;
    }
    if (now >= deadline) {
      if ((size = mailbox_->take_answer(in_))) break;
      time_out("answer");
    }
    slept = mailbox_->sleep(std::min(next_check, deadline) - now) || slept;
  }
  answer_spin_.learn(clock::now() - start, slept);
  proto::frame_view frame;
  std::error_code error;
  const auto status = proto::parse_frame(std::span(in_).first(*size), frame, error);
  if (status != proto::parse_status::complete || frame.frame_size() != *size ||
      frame.head.request_id != head.request_id) {
    throw Error(errc::bad_message,
                "gpumemd's answer in the request mailbox does not match the "
                "request");
  }
  return frame;
}

void transport::check_reply(const proto::frame_view& frame, message_type type,
                            const std::vector<unique_fd>& fds) const {
  if (fds.size() != frame.head.fd_count) {
    throw Error(errc::unexpected_handle,
                "gpumemd's reply announced " + std::to_string(frame.head.fd_count) +
                    " descriptor(s) and carried " + std::to_string(fds.size()));
  }
  if (frame.head.type == static_cast<std::uint16_t>(message_type::error)) {
    proto::error_reply refusal{};
    if (proto::decode_payload(frame.payload, refusal)) {
      throw Error(errc::bad_message, "gpumemd sent a malformed error reply");
    }
    throw Error(static_cast<errc>(refusal.code), refusal.text);
  }
  if (frame.head.type != proto::reply_type(type)) {
    throw Error(errc::bad_message, "gpumemd answered with the wrong message type");
  }
  const std::uint16_t expected_fds =
      proto::find_request(static_cast<std::uint16_t>(type))->reply_fds;
  const bool count_fits =
      expected_fds == proto::kFdPerRecord ||
      (expected_fds == proto::kFdAtMostOne ? frame.head.fd_count <= 1
                                           : frame.head.fd_count == expected_fds);
  if (!count_fits) {
    throw Error(errc::unexpected_handle, "gpumemd's reply carries an unexpected descriptor count");
  }
}

}  // namespace gpumem::detail
