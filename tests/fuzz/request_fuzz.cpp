// Fuzz target: the whole request path of the daemon, in this process. Sessions (the daemon's
// own, over socketpairs), the request handler and the books of a small host-only daemon are fed
// a script (request_script.hpp) of frames, raw bytes and descriptors from up to kClients
// simulated client processes, which connect, read, hang up and die at any point, and send on
// their sockets or through their request mailboxes. Every reply must be a valid frame that
// decodes, with the descriptors its header announces. At the end
// everyone is gone, and the books must be empty and the process's descriptors as they were.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "../support/host_pools.hpp"
#include "books.hpp"
#include "gpumem/proto/mailbox.hpp"
#include "gpumem/shared/fd_passing.hpp"
#include "gpumem/shared/os/mapping.hpp"
#include "handlers/request_handler.hpp"
#include "net/client_poller.hpp"
#include "net/session.hpp"
#include "payload_types.hpp"
#include "request_script.hpp"

namespace {

using namespace gpumem;
using namespace gpumem::daemon;
using gpumem::fuzz::kClients;
using gpumem::fuzz::step;

[[noreturn]] void fail(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fputs("request fuzz: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
  std::abort();
}

std::size_t open_fd_count() {
  DIR* folder = ::opendir("/proc/self/fd");
  if (folder == nullptr) fail("cannot read /proc/self/fd");
  std::size_t count = 0;
  while (const dirent* entry = ::readdir(folder)) count += entry->d_name[0] != '.';
  ::closedir(folder);
  return count - 1;  // the folder's own descriptor
}

/// Descriptors a script may attach to what a client sends: made once, never given away.
struct attachable_fds {
  attachable_fds() {
    memfd = unique_fd(::memfd_create("gpumem-fuzz", MFD_CLOEXEC));
    int ends[2];
    if (!memfd || ::pipe2(ends, O_CLOEXEC) != 0) fail("cannot make descriptors to attach");
    pipe_read = unique_fd(ends[0]);
    pipe_write = unique_fd(ends[1]);
  }
  std::vector<int> picked(std::uint8_t mask) const {
    const std::array<int, fuzz::kAttachableFds> all{memfd.get(), pipe_read.get(), pipe_write.get()};
    std::vector<int> fds;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (mask & (1u << i)) fds.push_back(all[i]);
    }
    return fds;
  }
  unique_fd memfd, pipe_read, pipe_write;
};

/// Made once: the embedded default is YAML, whose parsing would take most of a short script's time.
const daemon_config& small_config() {
  static const daemon_config config = [] {
    daemon_config made = embedded_default_config();
    made.log_level = "off";
    // Small enough that a few replies left unread reach the limit.
    made.max_output_bytes = 128 * 1024;
    // Small pools, so that full pools and the choice by name are within a script's reach.
    pool_config host;
    host.name = "host";
    host.size = 1 << 20;
    pool_config spare = host;
    spare.name = "spare";
    spare.size = 64 << 10;
    made.pools = {host, spare};
    return made;
  }();
  return config;
}

/// Whether the daemon's end of @p socket is closed (polled, never waits).
bool hung_up(int socket) {
  pollfd watched{socket, POLLRDHUP, 0};
  return ::poll(&watched, 1, 0) > 0 && (watched.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
}

/// A client's request mailbox, written by hand as a misbehaving client could: the daemon's copy
/// of what it reads is all that keeps it safe.
class hand_written_mailbox {
 public:
  hand_written_mailbox(const unique_fd& memory, unique_fd doorbell)
      : doorbell_(std::move(doorbell)),
        mapping_(os::mapping::share(memory.get(), proto::kMailboxBytes, os::access::read_write)) {}

  /// Puts @p bytes in the request slot (with fuzz::kOversized, a size word beyond the slot) and
  /// rings; with fuzz::kNoNewRequest only rings.
  void post(std::span<const std::byte> bytes, std::uint8_t how) {
    proto::mailbox_layout& box = layout();
    if ((how & fuzz::kNoNewRequest) == 0) {
      const std::size_t size = std::min(bytes.size(), sizeof box.request);
      std::copy_n(bytes.begin(), size, box.request);
      const std::size_t said = how & fuzz::kOversized ? size + sizeof box.request : size;
      proto::mailbox_word(box.request_size).store(static_cast<std::uint32_t>(said));
      proto::mailbox_word(box.request_seq).store(++posted_);
    }
    const std::uint64_t one = 1;
    if (::write(doorbell_.get(), &one, sizeof one) != sizeof one) fail("cannot ring a doorbell");
  }
  /// The answer to the request posted last, if the daemon gave it.
  std::optional<std::span<const std::byte>> answer() {
    proto::mailbox_layout& box = layout();
    if (proto::mailbox_word(box.reply_seq).load() != posted_) return std::nullopt;
    const std::uint32_t size = proto::mailbox_word(box.reply_size).load();
    if (size > sizeof box.reply) fail("an answer larger than the reply slot");
    return std::span<const std::byte>(box.reply, size);
  }

 private:
  proto::mailbox_layout& layout() { return *static_cast<proto::mailbox_layout*>(mapping_.get()); }
  unique_fd doorbell_;
  os::mapping mapping_;
  std::uint32_t posted_ = 0;
};

/// One simulated client process: its current connection, and every session it opened (a
/// process's state outlives a closed connection while the process lives).
struct client_process {
  unique_fd socket;
  std::vector<std::weak_ptr<session>> sessions;
  std::uint32_t next_request_id = 1;
  std::vector<std::byte> unparsed;
  std::vector<unique_fd> fds;  ///< received and not yet matched with the reply they came with
  std::optional<hand_written_mailbox> mailbox;  ///< from open_mailbox's answer, once read
  /// subscribe_events may have gone on the socket (in a frame, or somewhere in raw bytes): the
  /// daemon may have closed the mailbox since.
  bool may_stream_events = false;
};

class in_process_daemon {
 public:
  in_process_daemon() : books_(config_, host_pools), handler_(books_) {}

  void connect(client_process& client) {
    if (client.socket) return;
    int ends[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, ends) != 0) {
      fail("socketpair failed");
    }
    auto sessions = std::move(client.sessions);
    client = client_process{};
    client.socket = unique_fd(ends[0]);
    client.sessions = std::move(sessions);
    auto made = std::make_shared<session>(unique_fd(ends[1]), poller_, books_, handler_, config_,
                                          [this](session& ended) { sessions_.erase(&ended); });
    sessions_.emplace(made.get(), made);
    client.sessions.push_back(made);
    made->start();
  }

  void send(client_process& client, std::span<const std::byte> bytes, std::vector<int> fds) {
    if (!client.socket) return;
    // Bounded: a daemon that stopped reading (it hung up, or waits to write) gets no more.
    for (int stalled = 0; !bytes.empty() && stalled < 2;) {
      std::error_code error;
      const std::size_t sent = send_with_fds(client.socket.get(), bytes, fds, error);
      if (error && error != std::errc::resource_unavailable_try_again) return;
      if (sent > 0) fds.clear();
      stalled = sent == 0 ? stalled + 1 : 0;
      bytes = bytes.subspan(sent);
      run();
    }
  }

  /// Posts @p bytes in the client's mailbox and checks the answer, if one came.
  void post(client_process& client, std::span<const std::byte> bytes, std::uint8_t how) {
    if (!client.mailbox) return;
    client.mailbox->post(bytes, how);
    run();
    const auto answer = client.mailbox->answer();
    if (!answer) {
      // Unanswered only where the connection ended (its mailbox with it) or streams events.
      if (client.socket && !client.may_stream_events && !hung_up(client.socket.get())) {
        fail("a request through the mailbox went unanswered on an open connection");
      }
      return;
    }
    proto::frame_view frame;
    std::error_code error;
    if (proto::parse_frame(*answer, frame, error) != proto::parse_status::complete ||
        frame.frame_size() != answer->size()) {
      fail("the mailbox's answer is not one whole frame");
    }
    if (frame.head.fd_count != 0) fail("an answer in the mailbox announces descriptors");
    check_reply(frame);
  }

  /// The client closes its socket; its process still maps its mailbox and may ring it.
  void disconnect(client_process& client) {
    client.socket.reset();
    client.unparsed.clear();
    client.fds.clear();
  }

  void process_exit(client_process& client) {
    for (const auto& weak : client.sessions) {
      if (const auto alive = weak.lock()) alive->stop("process exited");
    }
    client.sessions.clear();
    disconnect(client);
    client.mailbox.reset();
  }

  void read(client_process& client) {
    if (!client.socket) return;
    for (;;) {
      std::array<std::byte, 16384> buffer;
      std::vector<unique_fd> fds;
      std::error_code error;
      const std::size_t received = recv_with_fds(client.socket.get(), buffer, fds, error);
      for (unique_fd& fd : fds) client.fds.push_back(std::move(fd));
      if (error || received == 0) break;
      client.unparsed.insert(client.unparsed.end(), buffer.begin(), buffer.begin() + received);
    }
    check_replies(client);
  }

  void settle() { books_.sync.settle(); }

  /// Runs the daemon's loop until it has nothing left to do now.
  void run() {
    do {
      io_.restart();  // poll() stops an io_context that has no work left
    } while (poller_.run_ready() > 0);
  }

  /// Every client process ends; then nothing may be left.
  void finish(std::array<client_process, kClients>& clients) {
    for (auto& client : clients) disconnect(client);
    run();
    for (auto& client : clients) process_exit(client);
    run();
    for (int attempt = 0; attempt < 8 && !books_.sync.settle(); ++attempt) {
    }
    check_empty();
  }

 private:
  static void check_replies(client_process& client) {
    std::span<const std::byte> rest = client.unparsed;
    for (;;) {
      proto::frame_view frame;
      std::error_code error;
      const auto status = proto::parse_frame(rest, frame, error);
      if (status == proto::parse_status::invalid) {
        fail("the daemon sent a bad header: %s", error.message().c_str());
      }
      if (status == proto::parse_status::incomplete) break;
      check_reply(frame);
      take_descriptors(client, frame);
      rest = rest.subspan(frame.frame_size());
    }
    client.unparsed.erase(client.unparsed.begin(),
                          client.unparsed.end() - static_cast<std::ptrdiff_t>(rest.size()));
    if (client.unparsed.empty() && !client.fds.empty()) {
      fail("%zu descriptors came that no reply announced", client.fds.size());
    }
  }

  /// The descriptors @p frame announced, which came with its first byte: open_mailbox's make
  /// the client's mailbox.
  static void take_descriptors(client_process& client, const proto::frame_view& frame) {
    if (client.fds.size() < frame.head.fd_count) {
      fail("a reply announced %u descriptors but %zu came", frame.head.fd_count, client.fds.size());
    }
    const auto first = client.fds.begin();
    const auto end = first + frame.head.fd_count;
    if (frame.head.type == proto::reply_type(proto::message_type::open_mailbox)) {
      if (frame.head.fd_count != 2) fail("open_mailbox's answer has no mailbox");
      client.mailbox.emplace(first[0], std::move(first[1]));
    }
    client.fds.erase(first, end);
  }

  static void check_reply(const proto::frame_view& frame) {
    std::error_code decoded;
    const bool known = fuzz::with_payload_type(frame.head.type, [&]<class Payload>() {
      Payload payload{};
      decoded = proto::decode_payload(frame.payload, payload);
    });
    if (!known || (frame.head.type & proto::kReplyBit) == 0) {
      if (frame.head.type != static_cast<std::uint16_t>(proto::message_type::error)) {
        fail("the daemon sent a frame of type %#x, neither a reply nor an error", frame.head.type);
      }
    }
    if (decoded) {
      fail("a reply of type %#x does not decode: %s", frame.head.type, decoded.message().c_str());
    }
  }

  void check_empty() {
    if (!sessions_.empty()) fail("%zu sessions outlived their processes", sessions_.size());
    if (!books_.rows.clients().empty()) {
      fail("%zu clients left in the ledger", books_.rows.clients().size());
    }
    for (const auto family :
         {object_family::allocation, object_family::reservation, object_family::sync}) {
      if (books_.rows.count(family) != 0) {
        fail("%zu %s objects left in the ledger", books_.rows.count(family), family_name(family));
      }
    }
    if (books_.sync.has_pending()) fail("lock clean-ups still pending with nobody left");
    const proto::stats_reply stats = books_.stats();
    if (stats.head.allocation_count != 0) {
      fail("%llu allocations left", static_cast<unsigned long long>(stats.head.allocation_count));
    }
    for (const proto::pool_stats& each : stats.records) {
      if (each.bytes_in_use != 0 || each.bytes_reserved != 0 || each.allocations != 0) {
        fail("pool %u keeps %llu bytes in use, %llu reserved, %llu allocations", each.pool_id,
             static_cast<unsigned long long>(each.bytes_in_use),
             static_cast<unsigned long long>(each.bytes_reserved),
             static_cast<unsigned long long>(each.allocations));
      }
    }
  }

  const daemon_config& config_ = small_config();
  books books_;
  request_handler handler_;
  boost::asio::io_context io_{1};
  client_poller poller_{io_};  // before the sessions, which it serves
  std::unordered_map<session*, std::shared_ptr<session>> sessions_;
};

void run_script(std::span<const std::uint8_t> input, const attachable_fds& attachable) {
  in_process_daemon daemon;
  std::array<client_process, kClients> clients;
  fuzz::script_reader script(input);
  while (!script.done()) {
    const std::uint8_t code = script.u8();
    client_process& client = clients[(code / fuzz::kStepCount) % kClients];
    switch (static_cast<step>(code % fuzz::kStepCount)) {
      case step::connect:
        daemon.connect(client);
        break;
      case step::frame: {
        const std::uint16_t type = script.u16();
        const std::uint16_t size = script.u16();
        const std::uint8_t fds = script.u8();
        const auto payload = script.take(size);
        std::vector<std::byte> frame;
        proto::append_frame(frame, type, client.next_request_id++, proto::empty_payload{});
        frame.insert(frame.end(), payload.begin(), payload.end());
        const auto payload_size = static_cast<std::uint32_t>(payload.size());
        std::memcpy(frame.data() + offsetof(proto::header, payload_size), &payload_size,
                    sizeof payload_size);
        if (fds & fuzz::kThroughMailbox) {
          daemon.post(client, frame, 0);
        } else {
          client.may_stream_events |=
              type == static_cast<std::uint16_t>(proto::message_type::subscribe_events);
          daemon.send(client, frame, attachable.picked(fds));
        }
        break;
      }
      case step::raw: {
        const std::uint16_t size = script.u16();
        const std::uint8_t fds = script.u8();
        if (fds & fuzz::kThroughMailbox) {
          daemon.post(client, script.take(size), fds);
        } else {
          client.may_stream_events = true;
          daemon.send(client, script.take(size), attachable.picked(fds));
        }
        break;
      }
      case step::disconnect:
        daemon.disconnect(client);
        break;
      case step::process_exit:
        daemon.process_exit(client);
        break;
      case step::read:
        daemon.read(client);
        break;
      case step::hello: {
        proto::hello_request hello{};
        hello.protocol_version = proto::kProtocolVersion;
        std::vector<std::byte> frame;
        proto::append_frame(frame, static_cast<std::uint16_t>(proto::message_type::hello),
                            client.next_request_id++, hello);
        daemon.send(client, frame, {});
        break;
      }
      case step::settle:
        daemon.settle();
        break;
    }
    daemon.run();
  }
  daemon.finish(clients);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const attachable_fds attachable;
  static const bool quiet = (spdlog::set_level(spdlog::level::off), true);
  (void)quiet;
  const std::size_t fds_before = open_fd_count();
  run_script(std::span(data, size), attachable);
  const std::size_t fds_after = open_fd_count();
  if (fds_after != fds_before) {
    fail("%zu descriptors open before the script, %zu after", fds_before, fds_after);
  }
  return 0;
}
