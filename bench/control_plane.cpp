// Control-plane benchmark, like for like: gpumemd and redis-server on Unix sockets, driven by the
// same client code in the same two shapes, one request in flight per connection:
//   processes: N forked processes, one blocking connection each;
//   epoll:     N non-blocking connections from one process, served by one epoll loop.
// Both servers see raw frames (gpumemd's binary protocol, redis's RESP), so neither pays for a
// client library the other does not. gpumemd is driven twice: on the socket, as redis, and
// through each connection's request mailbox (proto/mailbox.hpp), where the one process of the
// epoll shape waits on all N mailboxes' futex words at once (futex_waitv) instead. Two requests
// each: gpumemd's ping against redis's PING, and a small real request, gpumemd's allocate or free
// of 4 KiB from the host pool against redis's GET of a 3-byte value. Prints requests/s, p50 and p99
// for each server, shape, request and N, with the CPU time per request of the server's loop and of
// all clients together (a rate compares servers only where the server is the one that is busy:
// srv_cpu_us times requests/s near 10^6), then the ratios gpumemd/redis of the rates.
// redis-benchmark's GET rate is an extra line.
//
//   control_plane [--seconds S] [--clients 1,16,64] [--daemon PATH] [--no-redis-benchmark]
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "child_results.hpp"
#include "gpumem/proto/codec.hpp"
#include "gpumem/shared/fd_passing.hpp"
#include "gpumem/shared/sync/futex.hpp"
#include "request_mailbox.hpp"

namespace {

namespace proto = gpumem::proto;
using clock_type = std::chrono::steady_clock;
using proto::message_type;

/// Latencies kept per connection: enough for a percentile, bounded for the shared result area.
constexpr std::size_t kMaxSamplesPerConnection = 100000;

enum class server_kind { gpumemd, gpumemd_mailbox, redis };
enum class request_kind { ping, small };
enum class client_shape { processes, epoll };

const char* name_of(server_kind server) {
  switch (server) {
    case server_kind::gpumemd:
      return "gpumemd";
    case server_kind::gpumemd_mailbox:
      return "gpumemd-mailbox";
    case server_kind::redis:
      break;
  }
  return "redis";
}
const char* name_of(client_shape shape) {
  return shape == client_shape::processes ? "processes" : "epoll";
}
const char* name_of(server_kind server, request_kind request) {
  if (server != server_kind::redis) return request == request_kind::ping ? "ping" : "allocate|free";
  return request == request_kind::ping ? "PING" : "GET";
}

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what);
}
[[noreturn]] void fail_errno(const std::string& what) {
  throw std::system_error(errno, std::system_category(), what);
}

void write_all(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0) fail_errno("send");
    bytes = bytes.subspan(static_cast<std::size_t>(sent));
  }
}

int connect_unix(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_errno("socket");
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const int error = errno;
    ::close(fd);
    errno = error;
    fail_errno("connect " + path);
  }
  return fd;
}

/// One connection's side of a protocol: the next request, and where a complete reply ends.
class conversation {
 public:
  virtual ~conversation() = default;
  virtual void append_request(std::vector<std::byte>& out) = 0;
  /// @return the size of the complete reply at the front of @p in, or 0 while incomplete.
  /// @throws std::runtime_error when the server refused or answered something else.
  virtual std::size_t take_reply(std::span<const std::byte> in) = 0;
};

/// gpumemd's frames: hello once, then pings, or allocate and release turn about.
class gpumemd_conversation final : public conversation {
 public:
  explicit gpumemd_conversation(request_kind kind) : kind_(kind) {}

  void append_hello(std::vector<std::byte>& out) {
    proto::hello_request hello{};
    hello.protocol_version = proto::kProtocolVersion;
    hello.client_pid = static_cast<std::uint32_t>(::getpid());
    if (proto::make_wire_name("control-plane-bench", hello.client_label)) fail("label");
    expect_ = message_type::hello;
    proto::append_frame(out, static_cast<std::uint16_t>(expect_), ++request_id_, hello);
  }

  void append_request(std::vector<std::byte>& out) override {
    if (kind_ == request_kind::ping) {
      expect_ = message_type::ping;
      proto::append_frame(out, static_cast<std::uint16_t>(expect_), ++request_id_,
                          proto::empty_payload{});
    } else if (!held_) {
      proto::allocate_request allocate{};
      allocate.size = 4096;
      allocate.device = proto::kHostDevice;
      expect_ = message_type::allocate;
      proto::append_frame(out, static_cast<std::uint16_t>(expect_), ++request_id_, allocate);
    } else {
      proto::release_request release{};
      release.alloc_id = *held_;
      expect_ = message_type::release;
      proto::append_frame(out, static_cast<std::uint16_t>(expect_), ++request_id_, release);
    }
  }

  std::size_t take_reply(std::span<const std::byte> in) override {
    proto::frame_view frame;
    std::error_code error;
    const auto status = proto::parse_frame(in, frame, error);
    if (status == proto::parse_status::incomplete) return 0;
    if (status == proto::parse_status::invalid)
      fail("gpumemd sent a bad frame: " + error.message());
    if (frame.head.type == static_cast<std::uint16_t>(message_type::error)) {
      proto::error_reply refusal{};
      if (proto::decode_payload(frame.payload, refusal)) fail("gpumemd sent a bad error reply");
      fail(std::string("gpumemd refused: ") + refusal.text);
    }
    if (frame.head.type != proto::reply_type(expect_) || frame.head.request_id != request_id_) {
      fail("gpumemd answered out of step");
    }
    if (expect_ == message_type::allocate) {
      proto::allocation_reply granted{};
      if (proto::decode_payload(frame.payload, granted)) fail("gpumemd sent a bad allocation");
      held_ = granted.alloc_id;
    } else if (expect_ == message_type::release) {
      held_.reset();
    }
    return frame.frame_size();
  }

 private:
  request_kind kind_;
  message_type expect_ = message_type::hello;
  std::uint32_t request_id_ = 0;
  std::optional<std::uint64_t> held_;
};

/// RESP: "*1\r\n$4\r\nPING\r\n" is answered "+PONG\r\n", a GET "$3\r\nxxx\r\n".
class redis_conversation final : public conversation {
 public:
  explicit redis_conversation(request_kind kind) : kind_(kind) {}

  void append_request(std::vector<std::byte>& out) override {
    const std::string_view command = kind_ == request_kind::ping
                                         ? std::string_view("*1\r\n$4\r\nPING\r\n")
                                         : std::string_view("*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n");
    const auto* first = reinterpret_cast<const std::byte*>(command.data());
    out.insert(out.end(), first, first + command.size());
  }

  std::size_t take_reply(std::span<const std::byte> in) override {
    const std::string_view text(reinterpret_cast<const char*>(in.data()), in.size());
    const std::size_t line_end = text.find("\r\n");
    if (line_end == std::string_view::npos) return 0;
    if (text.front() == '+') return line_end + 2;
    if (text.front() == '$') {
      long length = 0;
      std::from_chars(text.data() + 1, text.data() + line_end, length);
      if (length < 0) fail("redis has no value for the key");
      const std::size_t whole = line_end + 2 + static_cast<std::size_t>(length) + 2;
      return text.size() >= whole ? whole : 0;
    }
    fail("redis answered " + std::string(text.substr(0, line_end)));
  }

 private:
  request_kind kind_;
};

std::unique_ptr<conversation> open_conversation(server_kind server, request_kind request,
                                                const std::string& socket, int& fd);
using gpumem::detail::request_mailbox;
/// The request mailbox of gpumemd's connection @p fd, asked for on it after hello.
std::unique_ptr<request_mailbox> open_mailbox(int fd);

/// Sends one request on a blocking socket and reads its reply.
void round_trip(int fd, conversation& talk, std::vector<std::byte>& out,
                std::vector<std::byte>& in) {
  out.clear();
  talk.append_request(out);
  write_all(fd, out);
  std::size_t filled = 0;
  for (;;) {
    if (const std::size_t size = talk.take_reply(std::span(in).first(filled))) {
      if (size != filled) fail("the server answered more than was asked");
      return;
    }
    if (filled == in.size()) in.resize(in.size() * 2);
    const ssize_t got = ::read(fd, in.data() + filled, in.size() - filled);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) fail("the server closed the connection");
    filled += static_cast<std::size_t>(got);
  }
}

/// As round_trip(), through @p box.
void mailbox_round_trip(request_mailbox& box, conversation& talk, std::vector<std::byte>& out,
                        std::vector<std::byte>& in) {
  out.clear();
  talk.append_request(out);
  box.post(out);
  std::optional<std::size_t> size;
  while (!(size = box.take_answer(in))) box.sleep(std::chrono::seconds(1));
  if (talk.take_reply(std::span(in).first(*size)) != *size) fail("a mailbox answer of a bad size");
}

std::unique_ptr<request_mailbox> open_mailbox(int fd) {
  std::vector<std::byte> out;
  proto::append_frame(out, static_cast<std::uint16_t>(message_type::open_mailbox), 1000000,
                      proto::empty_payload{});
  write_all(fd, out);
  std::vector<std::byte> in(4096);
  std::vector<gpumem::unique_fd> fds;
  std::size_t filled = 0;
  proto::frame_view frame;
  for (;;) {
    std::error_code error;
    filled += gpumem::recv_with_fds(fd, std::span(in).subspan(filled), fds, error);
    if (error) fail("open_mailbox: " + error.message());
    const auto status = proto::parse_frame(std::span(in).first(filled), frame, error);
    if (status == proto::parse_status::invalid) fail("gpumemd sent a bad frame");
    if (status == proto::parse_status::complete) break;
  }
  if (frame.head.type != proto::reply_type(message_type::open_mailbox) || fds.size() != 2) {
    fail("gpumemd did not give a request mailbox");
  }
  return std::make_unique<request_mailbox>(std::move(fds[0]), std::move(fds[1]));
}

std::unique_ptr<conversation> open_conversation(server_kind server, request_kind request,
                                                const std::string& socket, int& fd) {
  fd = connect_unix(socket);
  if (server == server_kind::redis) return std::make_unique<redis_conversation>(request);
  auto talk = std::make_unique<gpumemd_conversation>(request);
  std::vector<std::byte> out;
  std::vector<std::byte> in(4096);
  talk->append_hello(out);
  write_all(fd, out);
  std::size_t filled = 0;
  while (talk->take_reply(std::span(in).first(filled)) == 0) {
    const ssize_t got = ::read(fd, in.data() + filled, in.size() - filled);
    if (got <= 0) fail("gpumemd closed the connection at hello");
    filled += static_cast<std::size_t>(got);
  }
  return talk;
}

// What one connection measured; in memory shared across fork() for the processes shape.
struct connection_result {
  std::uint64_t requests;
  std::uint64_t samples;
  float latency_us[kMaxSamplesPerConnection];

  void record(clock_type::duration took) {
    if (samples < kMaxSamplesPerConnection) {
      latency_us[samples++] = std::chrono::duration<float, std::micro>(took).count();
    }
    ++requests;
  }
};

struct measurement {
  double requests_per_second;
  double p50_us;
  double p99_us;
  double server_cpu_us;  ///< the server's main thread's CPU time per request
  double client_cpu_us;  ///< every client process's CPU time per request, all together
};

/// CPU time the thread @p pid has run, from the scheduler's own accounting (nanoseconds, unlike
/// the ticks of /proc/PID/stat). The main thread is each server's loop.
std::chrono::nanoseconds cpu_time(pid_t pid) {
  FILE* file = std::fopen(("/proc/" + std::to_string(pid) + "/schedstat").c_str(), "r");
  unsigned long long ns = 0;
  if (file != nullptr) {
    if (std::fscanf(file, "%llu", &ns) != 1) ns = 0;
    std::fclose(file);
  }
  return std::chrono::nanoseconds(ns);
}

/// CPU time of this process and of its children reaped so far (the client processes once they
/// are waited for; the servers are reaped only at the end).
std::chrono::nanoseconds clients_cpu_time() {
  const auto total = [](int who) {
    rusage used{};
    ::getrusage(who, &used);
    return std::chrono::seconds(used.ru_utime.tv_sec + used.ru_stime.tv_sec) +
           std::chrono::microseconds(used.ru_utime.tv_usec + used.ru_stime.tv_usec);
  };
  return total(RUSAGE_SELF) + total(RUSAGE_CHILDREN);
}

struct shared_results {
  connection_result* results;
  std::size_t bytes;
  explicit shared_results(int connections)
      : bytes(sizeof(connection_result) * static_cast<std::size_t>(connections)) {
    void* area = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) fail_errno("mmap of the result area");
    results = static_cast<connection_result*>(area);  // zero-filled
  }
  ~shared_results() { ::munmap(results, bytes); }
  shared_results(const shared_results&) = delete;
  shared_results& operator=(const shared_results&) = delete;
};

measurement summarise(std::span<const connection_result> results, double seconds) {
  std::vector<float> all;
  std::uint64_t requests = 0;
  for (const connection_result& each : results) {
    requests += each.requests;
    all.insert(all.end(), each.latency_us, each.latency_us + each.samples);
  }
  std::sort(all.begin(), all.end());
  const auto percentile = [&](double p) {
    return all.empty() ? 0.0
                       : all[std::min(all.size() - 1, static_cast<std::size_t>(p * all.size()))];
  };
  return {static_cast<double>(requests) / seconds, percentile(0.50), percentile(0.99), 0, 0};
}

clock_type::time_point seconds_from_now(double seconds) {
  return clock_type::now() +
         std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
}

struct run_plan {
  server_kind server;
  request_kind request;
  std::string socket;
  int connections;
  double seconds;
};

measurement run_processes(const run_plan& plan) {
  shared_results area(plan.connections);
  // Every child connects first; the clock starts for all of them at once.
  const auto start = clock_type::now() + std::chrono::milliseconds(200 + 5 * plan.connections);
  const auto stop = start + std::chrono::duration_cast<clock_type::duration>(
                                std::chrono::duration<double>(plan.seconds));
  std::vector<pid_t> children;
  for (int i = 0; i < plan.connections; ++i) {
    const pid_t child = ::fork();
    if (child < 0) fail_errno("fork");
    if (child == 0) {
      try {
        int fd = -1;
        auto talk = open_conversation(plan.server, plan.request, plan.socket, fd);
        const auto box = plan.server == server_kind::gpumemd_mailbox ? open_mailbox(fd) : nullptr;
        std::vector<std::byte> out;
        std::vector<std::byte> in(4096);
        std::this_thread::sleep_until(start);
        for (auto now = clock_type::now(); now < stop;) {
          if (box) {
            mailbox_round_trip(*box, *talk, out, in);
          } else {
            round_trip(fd, *talk, out, in);
          }
          const auto done = clock_type::now();
          area.results[i].record(done - now);
          now = done;
        }
        ::close(fd);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "client process %d: %s\n", i, error.what());
        ::_exit(1);
      }
      ::_exit(0);
    }
    children.push_back(child);
  }
  if (!gpumem::bench::wait_for_all(children, gpumem::bench::exited_cleanly)) {
    fail("a client process failed");
  }
  return summarise(std::span(area.results, static_cast<std::size_t>(plan.connections)),
                   plan.seconds);
}

measurement run_epoll(const run_plan& plan) {
  struct connection {
    int fd = -1;
    std::unique_ptr<conversation> talk;
    std::vector<std::byte> in = std::vector<std::byte>(4096);
    std::size_t filled = 0;
    clock_type::time_point sent;
  };
  std::vector<connection> connections(static_cast<std::size_t>(plan.connections));
  std::vector<connection_result> results(connections.size());
  const int poller = ::epoll_create1(EPOLL_CLOEXEC);
  if (poller < 0) fail_errno("epoll_create1");
  for (std::size_t i = 0; i < connections.size(); ++i) {
    connection& each = connections[i];
    each.talk = open_conversation(plan.server, plan.request, plan.socket, each.fd);
    ::fcntl(each.fd, F_SETFL, ::fcntl(each.fd, F_GETFL) | O_NONBLOCK);
    epoll_event interest{};
    interest.events = EPOLLIN;
    interest.data.u64 = i;
    if (::epoll_ctl(poller, EPOLL_CTL_ADD, each.fd, &interest) != 0) fail_errno("epoll_ctl");
  }
  std::vector<std::byte> out;
  const auto send_next = [&](connection& each) {
    out.clear();
    each.talk->append_request(out);
    each.sent = clock_type::now();
    // One small request on a socket with nothing else queued: the kernel takes it whole.
    if (::send(each.fd, out.data(), out.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(out.size())) {
      fail_errno("send");
    }
  };
  const auto stop = seconds_from_now(plan.seconds);
  for (connection& each : connections) send_next(each);
  std::vector<epoll_event> ready(connections.size());
  std::size_t in_flight = connections.size();
  while (in_flight > 0) {
    const int count = ::epoll_wait(poller, ready.data(), static_cast<int>(ready.size()), 1000);
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) fail(count == 0 ? "the server stopped answering" : "epoll_wait failed");
    for (int k = 0; k < count; ++k) {
      const std::size_t i = ready[k].data.u64;
      connection& each = connections[i];
      const ssize_t got =
          ::read(each.fd, each.in.data() + each.filled, each.in.size() - each.filled);
      if (got < 0 && errno == EAGAIN) continue;
      if (got <= 0) fail("the server closed a connection");
      each.filled += static_cast<std::size_t>(got);
      const std::size_t size = each.talk->take_reply(std::span(each.in).first(each.filled));
      if (size == 0) {
        if (each.filled == each.in.size()) each.in.resize(each.in.size() * 2);
        continue;
      }
      if (size != each.filled) fail("the server answered more than was asked");
      each.filled = 0;
      const auto now = clock_type::now();
      if (now >= stop) {
        --in_flight;
        continue;
      }
      results[i].record(now - each.sent);
      send_next(each);
    }
  }
  for (connection& each : connections) ::close(each.fd);
  ::close(poller);
  return summarise(results, plan.seconds);
}

/// The epoll shape through request mailboxes: one process, N connections, one futex_waitv on
/// every mailbox with a request in flight (a futex cannot join an epoll set).
measurement run_mailboxes(const run_plan& plan) {
  struct connection {
    int fd = -1;
    std::unique_ptr<conversation> talk;
    std::unique_ptr<request_mailbox> box;
    clock_type::time_point sent;
    bool in_flight = true;
    /// Until when the box is polled, as a library call spins (request_mailbox::sleep), once the
    /// server has marked its request as being handled; unset until then.
    std::optional<clock_type::time_point> poll_until;
  };
  if (plan.connections > FUTEX_WAITV_MAX) {
    fail("futex_waitv takes at most " + std::to_string(FUTEX_WAITV_MAX) + " mailboxes");
  }
  std::vector<connection> connections(static_cast<std::size_t>(plan.connections));
  std::vector<connection_result> results(connections.size());
  for (connection& each : connections) {
    each.talk = open_conversation(plan.server, plan.request, plan.socket, each.fd);
    each.box = open_mailbox(each.fd);
  }
  std::vector<std::byte> out;
  std::vector<std::byte> in(4096);
  const auto send_next = [&](connection& each) {
    out.clear();
    each.talk->append_request(out);
    each.sent = clock_type::now();
    each.poll_until.reset();
    each.box->post(out);
  };
  const auto stop = seconds_from_now(plan.seconds);
  for (connection& each : connections) send_next(each);
  std::vector<futex_waitv> waiters(connections.size());
  std::size_t in_flight = connections.size();
  while (in_flight > 0) {
    std::size_t waiting = 0;
    bool polling = false;
    const auto checked = clock_type::now();
    for (connection& each : connections) {
      if (!each.in_flight) continue;
      if (!each.poll_until && each.box->answering()) {
        each.poll_until = checked + request_mailbox::kSpinWhileAnswering;
      }
      polling = polling || (each.poll_until && checked < *each.poll_until);
      waiters[waiting++] = {each.box->unanswered_value(),
                            reinterpret_cast<std::uintptr_t>(each.box->answer_word()), FUTEX_32, 0};
    }
    if (polling) {
      gpumem::sync::cpu_relax();
    } else {
      timespec give_up{};
      ::clock_gettime(CLOCK_MONOTONIC, &give_up);
      ++give_up.tv_sec;
      // Returns at once (EAGAIN) when a word moved on since it was read.
      if (::syscall(SYS_futex_waitv, waiters.data(), waiting, 0, &give_up, CLOCK_MONOTONIC) < 0 &&
          errno == ETIMEDOUT) {
        fail("the server stopped answering");
      }
    }
    for (std::size_t i = 0; i < connections.size(); ++i) {
      connection& each = connections[i];
      if (!each.in_flight) continue;
      const auto size = each.box->take_answer(in);
      if (!size) continue;
      if (each.talk->take_reply(std::span(in).first(*size)) != *size) {
        fail("a mailbox answer of a bad size");
      }
      const auto now = clock_type::now();
      if (now >= stop) {
        each.in_flight = false;
        --in_flight;
        continue;
      }
      results[i].record(now - each.sent);
      send_next(each);
    }
  }
  for (connection& each : connections) ::close(each.fd);
  return summarise(results, plan.seconds);
}

/// A server in a child process, SIGTERMed and reaped when the owner goes.
class server_process {
 public:
  explicit server_process(std::vector<std::string> argv) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, STDOUT_FILENO);  // redis's banner; errors still reach stderr
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
  }
  pid_t pid() const noexcept { return pid_; }
  ~server_process() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

 private:
  pid_t pid_ = -1;
};

bool wait_for_socket(const std::string& path) {
  for (int i = 0; i < 500; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    const bool answered =
        ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    if (answered) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::optional<std::string> find_program(const std::string& name) {
  std::istringstream path(std::getenv("PATH") ? std::getenv("PATH") : "");
  for (std::string folder; std::getline(path, folder, ':');) {
    const auto candidate = std::filesystem::path(folder) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return std::nullopt;
}

/// Sets the key the GET requests read: 3 bytes, as redis-benchmark's.
void set_redis_key(const std::string& socket) {
  const int fd = connect_unix(socket);
  const std::string_view set = "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$3\r\nxxx\r\n";
  write_all(fd, std::as_bytes(std::span(set)));
  std::array<char, 16> reply{};
  const ssize_t got = ::read(fd, reply.data(), reply.size());
  ::close(fd);
  if (got < 5 || std::string_view(reply.data(), 5) != "+OK\r\n") fail("redis refused SET");
}

/// redis-benchmark's GET rate with @p clients connections from its one process.
std::optional<double> redis_benchmark_get(const std::string& bench, const std::string& socket,
                                          int clients) {
  const std::string command =
      bench + " -s " + socket + " -c " + std::to_string(clients) + " -t get -n 100000 -q 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string output;
  std::array<char, 512> chunk{};
  while (std::fgets(chunk.data(), chunk.size(), pipe) != nullptr) output += chunk.data();
  ::pclose(pipe);
  // "GET: 123456.79 requests per second, p50=0.247 msec"; the last figure printed is final.
  const std::regex rate(R"(GET: ([0-9.]+) requests per second)");
  std::optional<double> last;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), rate);
       it != std::sregex_iterator(); ++it) {
    last = std::stod((*it)[1]);
  }
  return last;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpumemd control-plane benchmark, like for like against redis-server"};
  double seconds = 1;
  std::vector<int> connection_counts{1, 16, 64};
  std::vector<client_shape> shapes{client_shape::processes, client_shape::epoll};
  std::vector<request_kind> requests{request_kind::ping, request_kind::small};
  std::string daemon = GPUMEM_BENCH_DAEMON;
  bool run_redis_benchmark = true;
  app.add_option("--seconds", seconds, "time per measurement")->check(CLI::PositiveNumber);
  app.add_option("--clients", connection_counts, "connection counts N")->delimiter(',');
  app.add_option("--shapes", shapes, "processes (one connection each), epoll (one process)")
      ->delimiter(',')
      ->transform(CLI::CheckedTransformer(std::map<std::string, client_shape>{
          {"processes", client_shape::processes}, {"epoll", client_shape::epoll}}));
  app.add_option("--requests", requests, "ping (ping/PING), small (allocate|free/GET)")
      ->delimiter(',')
      ->transform(CLI::CheckedTransformer(std::map<std::string, request_kind>{
          {"ping", request_kind::ping}, {"small", request_kind::small}}));
  app.add_option("--daemon", daemon, "gpumemd binary")->check(CLI::ExistingFile);
  app.add_flag("!--no-redis-benchmark", run_redis_benchmark,
               "skip the extra line of redis-benchmark's own GET rate");
  CLI11_PARSE(app, argc, argv);
  ::signal(SIGPIPE, SIG_IGN);

  char pattern[] = "/tmp/gpumem-bench-XXXXXX";
  const std::string folder = ::mkdtemp(pattern);
  const std::string gpumemd_socket = folder + "/gpumemd.sock";
  const std::string redis_socket = folder + "/redis.sock";
  int status = 0;
  try {
    server_process gpumemd({daemon, "--socket", gpumemd_socket, "--log-level", "warn"});
    if (!wait_for_socket(gpumemd_socket)) fail("gpumemd did not start");
    const auto redis_server = find_program("redis-server");
    std::optional<server_process> redis;
    if (redis_server) {
      redis.emplace(std::vector<std::string>{*redis_server, "--port", "0", "--unixsocket",
                                             redis_socket, "--save", "", "--appendonly", "no",
                                             "--daemonize", "no", "--loglevel", "warning"});
      if (!wait_for_socket(redis_socket)) fail("redis-server did not start");
      set_redis_key(redis_socket);
    } else {
      std::printf("redis-server not installed (not found on $PATH): gpumemd alone, no ratios\n");
    }

    std::printf("%-10s %5s %-15s %-14s %11s %9s %9s %11s %11s\n", "shape", "N", "server", "request",
                "requests/s", "p50_us", "p99_us", "srv_cpu_us", "cli_cpu_us");
    // Per shape, N and request: the servers measured back to back, so that all meet the same
    // load from whatever else runs on the machine.
    constexpr std::array kServers{server_kind::gpumemd, server_kind::gpumemd_mailbox,
                                  server_kind::redis};
    std::map<std::tuple<client_shape, int, request_kind>, std::array<double, 4>> ratios;
    for (const client_shape shape : shapes) {
      for (const int n : connection_counts) {
        for (const request_kind request : requests) {
          std::array<measurement, kServers.size()> measured{};
          for (const server_kind server : kServers) {
            if (server == server_kind::redis && !redis) continue;
            const bool is_gpumemd = server != server_kind::redis;
            const pid_t pid = is_gpumemd ? gpumemd.pid() : redis->pid();
            const run_plan plan{server, request, is_gpumemd ? gpumemd_socket : redis_socket, n,
                                seconds};
            const auto cpu_before = cpu_time(pid);
            const auto clients_before = clients_cpu_time();
            measurement m = shape == client_shape::processes         ? run_processes(plan)
                            : server == server_kind::gpumemd_mailbox ? run_mailboxes(plan)
                                                                     : run_epoll(plan);
            const double answered = std::max(1.0, m.requests_per_second * seconds);
            m.server_cpu_us =
                std::chrono::duration<double, std::micro>(cpu_time(pid) - cpu_before).count() /
                answered;
            m.client_cpu_us =
                std::chrono::duration<double, std::micro>(clients_cpu_time() - clients_before)
                    .count() /
                answered;
            std::printf("%-10s %5d %-15s %-14s %11.0f %9.1f %9.1f %11.2f %11.2f\n", name_of(shape),
                        n, name_of(server), name_of(server, request), m.requests_per_second,
                        m.p50_us, m.p99_us, m.server_cpu_us, m.client_cpu_us);
            std::fflush(stdout);
            measured[static_cast<std::size_t>(server)] = m;
          }
          if (redis) {
            const measurement& peer = measured[static_cast<std::size_t>(server_kind::redis)];
            auto& row = ratios[{shape, n, request}];
            for (const server_kind server : {server_kind::gpumemd, server_kind::gpumemd_mailbox}) {
              const measurement& ours = measured[static_cast<std::size_t>(server)];
              const std::size_t at = server == server_kind::gpumemd ? 0 : 2;
              row[at] = ours.requests_per_second / peer.requests_per_second;
              row[at + 1] = peer.server_cpu_us / ours.server_cpu_us;
            }
          }
        }
      }
    }
    if (redis) {
      std::printf(
          "\nratio gpumemd/redis (same shape, same N): requests/s, and in brackets redis's server "
          "CPU per request over gpumemd's; on the socket, then through the mailboxes\n");
      std::printf("%-10s %5s %-8s %16s %20s\n", "shape", "N", "gpumemd", "ping/PING",
                  "allocate|free/GET");
      for (const client_shape shape : shapes) {
        for (const int n : connection_counts) {
          for (const std::size_t at : {0, 2}) {
            std::printf("%-10s %5d %-8s", name_of(shape), n, at == 0 ? "socket" : "mailbox");
            for (const request_kind request : {request_kind::ping, request_kind::small}) {
              const auto found = ratios.find({shape, n, request});
              if (found == ratios.end()) {
                std::printf(" %*s", request == request_kind::ping ? 16 : 20, "-");
              } else {
                std::printf(" %*.2f (%5.2f)", request == request_kind::ping ? 8 : 12,
                            found->second[at], found->second[at + 1]);
              }
            }
            std::printf("\n");
          }
        }
      }
      const auto bench = find_program("redis-benchmark");
      if (run_redis_benchmark && bench) {
        const int most = connection_counts.back();
        if (const auto rate = redis_benchmark_get(*bench, redis_socket, most)) {
          std::printf(
              "extra: redis-benchmark -c %d -t get (its own client, one process): %.0f "
              "requests/s\n",
              most, *rate);
        }
      }
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "control_plane_bench: %s\n", error.what());
    status = 1;
  }
  std::filesystem::remove_all(folder);
  return status;
}
