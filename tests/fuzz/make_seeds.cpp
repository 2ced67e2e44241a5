// Writes the seed corpus of the fuzz targets: for the codec, one valid frame of every request
// and reply; for the request path, a script per request and the sequences a client lives by
// (hello, allocate, open, release; locks, barriers, channels; lists; descriptors sent; hang-ups
// and deaths half-way). Run as `gpumem_fuzz_seeds tests/fuzz/corpus` after the protocol changes;
// each seed is checked here to decode, so a seed that the codec refuses is a bug of this file.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gpumem/proto/codec.hpp"
#include "gpumem/proto/mailbox.hpp"
#include "request_script.hpp"

namespace {

using namespace gpumem::proto;
using gpumem::fuzz::kNoNewRequest;
using gpumem::fuzz::kOversized;
using gpumem::fuzz::kThroughMailbox;
using gpumem::fuzz::script_writer;
using gpumem::fuzz::step;

wire_name name(const char* text) {
  wire_name made{};
  if (make_wire_name(text, made)) std::abort();
  return made;
}

// A valid payload of each type, as a client or the daemon would send it.
void fill(empty_payload&) {}
void fill(hello_request& m) {
  m.protocol_version = kProtocolVersion;
  m.client_pid = 4242;
  m.client_label = name("fuzz");
}
void fill(hello_reply& m) {
  m = {1, 2, kMaxPayloadSize, 100, 0, {{0x5e55, 1}}, 0x5eed};
}
void fill(get_pool_request&) {}
void fill(pool_reply& m) {
  m.device = kHostDevice;
  m.size_limit = 1 << 20;
  m.name = name("host");
}
void fill(allocate_request& m) {
  m.size = 4096;
  m.device = kHostDevice;
  m.name = name("a");
}
void fill(open_request& m) {
  m.name = name("a");
}
void fill(allocation_reply& m) {
  m.alloc_id = 1;
  m.size = 4096;
}
void fill(release_request& m) {
  m.alloc_id = 1;
}
void fill(list_request&) {}
void fill(stats_reply& m) {
  pool_stats pool{};
  pool.name = name("host");
  pool.device = kHostDevice;
  pool.size_limit = 1 << 20;
  m.records = {pool};
  m.head.count = 1;
}
void fill(client_list_reply& m) {
  client_record client{};
  client.client_id = 1;
  client.client_pid = 4242;
  client.label = name("fuzz");
  m.records = {client};
  m.head.count = 1;
}
void fill(allocation_list_reply& m) {
  m.records = {{1, 4096, 1, 0, 1, name("a")}};
  m.head.count = 1;
}
void fill(reserve_request& m) {
  m.max_size = 2 << 20;
}
void fill(reservation_reply& m) {
  m = {1, 2 << 20, 0, 2 << 20, 0, access_mode::read_write, 1};
}
void fill(resize_request& m) {
  m = {1, 2 << 20};
}
void fill(chunks_request& m) {
  m.reservation_id = 1;
}
void fill(chunks_reply& m) {
  m.records = {{1, 0}};
  m.head = {1, 0, 1, 1, reservation_state::awake, 1};
}
void fill(reservation_release_request& m) {
  m.reservation_id = 1;
}
void fill(begin_version_request& m) {
  m = {1, 2 << 20};
}
void fill(version_request& m) {
  m = {1, 2};
}
void fill(reservation_target& m) {
  m.name = name("r");
}
void fill(sleep_request& m) {
  m.target.name = name("r");
}
void fill(reservation_status& m) {
  m.reservation_id = 1;
}
void fill(reservation_list_reply& m) {
  m.records = {
      {1, 2 << 20, 0, 1, 1, 0, name("r"), 1, 0, 1, 0, 0, reservation_state::awake, 1, 0, 0}};
  m.head.count = 1;
}
void fill(sync_attach_reply& m) {
  m = {1, 64, 1024, 0};
}
void fill(sync_open_request& m) {
  m.name = name("l");
  m.kind = sync_kind::lock;
}
void fill(sync_open_reply&) {}
void fill(channel_open_request& m) {
  m.open.name = name("c");
  m.open.kind = sync_kind::channel;
  m.open.parties = 2;
  m.open.role = sync_role::producer;
  m.layout = {4096, 4, 0};
}
void fill(sync_close_request&) {}
void fill(sync_reset_request& m) {
  m.name = name("l");
}
void fill(sync_list_reply& m) {
  sync_record record{};
  record.sync_id = 1;
  record.kind = sync_kind::lock;
  record.flags = sync_record::kHeld;
  record.owner_client_id = 1;
  record.name = name("l");
  m.records = {record};
  m.head.count = 1;
}
void fill(usage_list_reply& m) {
  usage_record record{};
  record.uid = 1000;
  record.connections = 1;
  record.bytes_limit = kNoLimit;
  m.records = {record};
  m.head.count = 1;
}
void fill(signal_page_request&) {}
void fill(signal_page_reply& m) {
  m = {4096, 0, 64};
}
void fill(sync_page_request&) {}
void fill(sync_page_reply& m) {
  m = {0, 64, 1024, 0};
}
void fill(event_record& m) {
  m.sequence = 1;
  m.kind = event_kind::died;
  m.client_id = 1;
  m.label = name("fuzz");
}
void fill(metrics_request&) {}
void fill(mailbox_reply& m) {
  m.bytes = static_cast<std::uint32_t>(kMailboxBytes);
}
void fill(metrics_reply& m) {
  const std::string_view text = "gpumemd_clients 1\n";
  m.records.assign(text.begin(), text.end());
  m.head = {1, static_cast<std::uint32_t>(text.size()), 0, static_cast<std::uint32_t>(text.size()),
            0};
}

template <class T>
T sample() {
  T made{};
  fill(made);
  return made;
}

class corpus {
 public:
  explicit corpus(std::filesystem::path folder) : folder_(std::move(folder)) {
    std::filesystem::create_directories(folder_);
  }
  void write(const std::string& seed, const void* data, std::size_t size) {
    std::ofstream out(folder_ / seed, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", (folder_ / seed).c_str());
      std::exit(1);
    }
  }

 private:
  std::filesystem::path folder_;
};

template <class T>
void codec_seed(corpus& out, const std::string& seed, std::uint16_t raw_type, const T& payload,
                std::uint16_t fds = 0) {
  std::vector<std::byte> frame;
  append_frame(frame, raw_type, 7, payload, fds, fds ? handle_type::host_memfd : handle_type::none);
  T decoded{};
  if (decode_payload(std::span(frame).subspan(sizeof(header)), decoded)) {
    std::fprintf(stderr, "seed %s does not decode\n", seed.c_str());
    std::exit(1);
  }
  out.write(seed, frame.data(), frame.size());
}

void codec_seeds(corpus& out) {
#define GPUMEM_X(name, number, request, reply, reply_fd_count, summary) \
  codec_seed(out, #name "-request", number, sample<request>());         \
  codec_seed(                                                           \
      out, #name "-reply", number | kReplyBit, sample<reply>(),         \
      reply_fd_count == kFdPerRecord || reply_fd_count == kFdAtMostOne ? 1 : reply_fd_count);
  GPUMEM_MESSAGE_TABLE(GPUMEM_X)
#undef GPUMEM_X
  codec_seed(out, "error", static_cast<std::uint16_t>(message_type::error),
             make_error_reply(errc::not_found, "no allocation named a"));
}

bool is_sync_request(message_type type) {
  return type == message_type::open_sync || type == message_type::open_channel ||
         type == message_type::close_sync || type == message_type::reset_sync ||
         type == message_type::get_sync_page;
}

struct script : script_writer {
  /// Connects @p client and greets the daemon.
  script& greet(std::size_t client) {
    add(step::connect, client);
    add(step::hello, client);
    return *this;
  }
  template <class T>
  script& send(std::size_t client, message_type type, const T& payload, std::uint8_t fds = 0) {
    frame(client, type, payload, fds);
    return *this;
  }
  script& then(step kind, std::size_t client) {
    add(kind, client);
    return *this;
  }
};

sync_open_request sync_open(const char* object, sync_kind kind, std::uint32_t parties,
                            sync_role role) {
  sync_open_request made{};
  made.name = name(object);
  made.kind = kind;
  made.parties = parties;
  made.role = role;
  return made;
}

allocate_request allocation(const char* object, std::uint64_t size, const char* pool = "") {
  allocate_request made = sample<allocate_request>();
  made.name = name(object);
  made.pool = name(pool);
  made.size = size;
  return made;
}

void request_seeds(corpus& out) {
  const auto save = [&](const std::string& seed, const script& made) {
    out.write(seed, made.bytes().data(), made.bytes().size());
  };
  // Each request alone, after hello (and after attach_sync where the request needs it).
#define GPUMEM_X(name, number, request, reply, reply_fd_count, summary)      \
  {                                                                          \
    script made;                                                             \
    made.greet(0);                                                           \
    if (is_sync_request(message_type::name)) {                               \
      made.send(0, message_type::attach_sync, empty_payload{});              \
      made.send(0, message_type::open_sync, sample<sync_open_request>());    \
    }                                                                        \
    made.send(0, message_type::name, sample<request>()).then(step::read, 0); \
    save("one-" #name, made);                                                \
  }
  GPUMEM_MESSAGE_TABLE(GPUMEM_X)
#undef GPUMEM_X

  const list_request from_start{};
  release_request release_first = sample<release_request>();
  release_request release_second = release_first;
  release_second.alloc_id = 2;
  open_request open_a = sample<open_request>();
  open_a.access = access_mode::read_only;

  script shared;
  shared.greet(0).greet(1);
  shared.send(0, message_type::allocate, allocation("a", 8192));
  shared.send(1, message_type::open, open_a);
  shared.send(0, message_type::list_allocations, from_start);
  shared.send(0, message_type::release, release_first);
  shared.send(1, message_type::release, release_first);
  shared.then(step::read, 0).then(step::read, 1);
  save("allocate-open-release", shared);

  script dies_holding;
  dies_holding.greet(0).greet(1);
  dies_holding.send(0, message_type::allocate, allocation("a", 4096));
  dies_holding.send(0, message_type::allocate, allocation("", 4096, "spare"));
  dies_holding.send(1, message_type::open, sample<open_request>());
  dies_holding.then(step::process_exit, 0);
  dies_holding.send(1, message_type::stats, empty_payload{});
  dies_holding.send(1, message_type::list_clients, from_start);
  dies_holding.send(1, message_type::release, release_second).then(step::read, 1);
  save("owner-dies-while-opened", dies_holding);

  script full;
  full.greet(0);
  for (int i = 0; i < 20; ++i) full.send(0, message_type::allocate, allocation("", 64 << 10));
  full.send(0, message_type::allocate, allocation("", 2 << 20)).then(step::read, 0);
  save("pool-full", full);

  script lock;
  lock.greet(0).greet(1);
  lock.send(0, message_type::attach_sync, empty_payload{});
  lock.send(1, message_type::attach_sync, empty_payload{});
  lock.send(0, message_type::open_sync, sample<sync_open_request>());
  lock.send(1, message_type::open_sync, sample<sync_open_request>());
  lock.send(1, message_type::list_sync, from_start);
  lock.send(1, message_type::reset_sync, sample<sync_reset_request>());
  lock.send(0, message_type::close_sync, sync_close_request{0, 0});
  lock.then(step::read, 0).then(step::read, 1).then(step::disconnect, 1).then(step::settle, 0);
  save("lock-open-reset-close", lock);

  // A lock of another access class than the clients' own: its page comes with the reply.
  script other_class;
  sync_open_request group_lock = sync_open("g", sync_kind::lock, 0, sync_role::party);
  group_lock.flags = mode_flags(0660) | kFlagSendPage;
  other_class.greet(0).greet(1);
  other_class.send(0, message_type::attach_sync, empty_payload{});
  other_class.send(1, message_type::attach_sync, empty_payload{});
  other_class.send(0, message_type::open_sync, group_lock).then(step::read, 0);
  other_class.send(1, message_type::open_sync, group_lock).then(step::read, 1);
  other_class.then(step::disconnect, 0).then(step::read, 1);
  save("lock-page-with-the-reply", other_class);

  script barrier;
  barrier.greet(0).greet(1).greet(2);
  for (std::size_t c = 0; c < 3; ++c) {
    barrier.send(c, message_type::attach_sync, empty_payload{});
    barrier.send(c, message_type::open_sync,
                 sync_open("b", sync_kind::barrier, 2, sync_role::party));
  }
  barrier.then(step::process_exit, 0);
  barrier.send(1, message_type::list_sync, from_start);
  barrier.send(2, message_type::open_sync, sync_open("b", sync_kind::barrier, 2, sync_role::party));
  sync_reset_request reset_b{};
  reset_b.name = name("b");
  reset_b.parties = 3;
  barrier.send(1, message_type::reset_sync, reset_b);
  barrier.then(step::read, 1).then(step::read, 2);
  save("barrier-party-dies", barrier);

  script channel;
  channel.greet(0).greet(1);
  channel.send(0, message_type::attach_sync, empty_payload{});
  channel.send(1, message_type::attach_sync, empty_payload{});
  channel.send(0, message_type::open_sync,
               sync_open("c", sync_kind::channel, 2, sync_role::producer));
  channel.send(1, message_type::open_sync,
               sync_open("c", sync_kind::channel, 2, sync_role::consumer));
  channel.send(0, message_type::allocate, allocation("c.slots", 16384));
  channel.send(1, message_type::open, [] {
    open_request slots{};
    slots.name = name("c.slots");
    return slots;
  }());
  channel.send(1, message_type::close_sync, sync_close_request{0, 1});
  channel.then(step::disconnect, 0).then(step::read, 1);
  save("channel-producer-leaves", channel);

  // A consumer that cuts the slots otherwise is refused; one that cuts them alike joins.
  script layouts;
  layouts.greet(0).greet(1).greet(2);
  for (std::size_t c = 0; c < 3; ++c) layouts.send(c, message_type::attach_sync, empty_payload{});
  channel_open_request producer = sample<channel_open_request>();
  channel_open_request other_cut = producer;
  other_cut.open.role = sync_role::consumer;
  other_cut.layout = {8192, 2, 0};
  channel_open_request same_cut = producer;
  same_cut.open.role = sync_role::consumer;
  layouts.send(0, message_type::open_channel, producer).then(step::read, 0);
  layouts.send(1, message_type::open_channel, other_cut).then(step::read, 1);
  layouts.send(2, message_type::open_channel, same_cut).then(step::read, 2);
  layouts.send(1, message_type::open_sync, other_cut.open).then(step::read, 1);
  save("channel-layouts-differ", layouts);

  script hangs_up;
  hangs_up.greet(0);
  hangs_up.send(0, message_type::attach_sync, empty_payload{});
  hangs_up.send(0, message_type::open_sync, sample<sync_open_request>());
  hangs_up.then(step::disconnect, 0).greet(0);
  hangs_up.send(0, message_type::open_sync, sample<sync_open_request>());
  hangs_up.then(step::read, 0).then(step::process_exit, 0);
  save("closes-connection-holding-a-lock", hangs_up);

  script descriptors;
  descriptors.greet(0).greet(1).greet(2);
  descriptors.send(0, message_type::ping, empty_payload{}, 0b001);
  descriptors.send(1, message_type::get_pool, get_pool_request{});
  descriptors.send(1, message_type::attach_sync, empty_payload{}, 0b110);
  descriptors.send(2, message_type::get_pool, get_pool_request{});
  descriptors.send(2, message_type::get_pool, get_pool_request{1, 0});
  descriptors.send(2, message_type::attach_sync, empty_payload{});
  descriptors.then(step::read, 2);
  save("descriptors-both-ways", descriptors);

  script unread;
  unread.greet(0);
  for (int i = 0; i < 40; ++i) unread.send(0, message_type::allocate, allocation("", 4096));
  for (int i = 0; i < 400; ++i) unread.send(0, message_type::list_allocations, from_start);
  save("replies-never-read", unread);

  script bad_header;
  bad_header.greet(0).greet(1);
  std::vector<std::byte> lying;
  append_frame(lying, static_cast<std::uint16_t>(message_type::ping), 1, empty_payload{}, 2,
               handle_type::host_memfd);
  bad_header.raw(0, lying);
  lying.assign(lying.size(), std::byte{0x41});
  bad_header.raw(1, lying);
  bad_header.then(step::read, 0).then(step::read, 1);
  save("bad-headers", bad_header);

  script partial;
  partial.greet(0);
  std::vector<std::byte> half;
  append_frame(half, static_cast<std::uint16_t>(message_type::allocate), 1, allocation("a", 4096));
  half.resize(half.size() / 2);
  partial.raw(0, half);
  partial.then(step::disconnect, 0);
  save("partial-frame-then-hang-up", partial);

  script early;
  early.then(step::connect, 0).send(0, message_type::allocate, allocation("a", 4096));
  early.send(0, message_type::hello, sample<hello_request>()).then(step::read, 0);
  save("request-before-hello", early);

  script watched;
  watched.greet(0).greet(1).greet(2);
  watched.send(0, message_type::subscribe_events, empty_payload{});
  watched.send(1, message_type::attach_sync, empty_payload{});
  watched.send(1, message_type::open_sync, sample<sync_open_request>());
  watched.send(1, message_type::allocate, allocation("", 4096));
  watched.then(step::process_exit, 1);
  watched.send(2, message_type::open, sample<open_request>());
  watched.send(2, message_type::get_metrics, metrics_request{});
  watched.send(2, message_type::get_metrics, metrics_request{1, 100, 0});
  watched.then(step::read, 0).then(step::read, 2).then(step::disconnect, 0);
  save("events-and-metrics-of-a-death", watched);

  script mailed;
  mailed.greet(0).greet(1);
  mailed.send(0, message_type::open_mailbox, empty_payload{}).then(step::read, 0);
  mailed.send(0, message_type::ping, empty_payload{}, kThroughMailbox);
  mailed.send(0, message_type::allocate, allocation("m", 4096), kThroughMailbox);
  open_request open_m = sample<open_request>();
  open_m.name = name("m");
  mailed.send(1, message_type::open, open_m).then(step::read, 1);
  mailed.send(0, message_type::list_allocations, from_start, kThroughMailbox);
  mailed.send(0, message_type::get_pool, sample<get_pool_request>(), kThroughMailbox);
  mailed.send(0, message_type::open_mailbox, empty_payload{}, kThroughMailbox);
  mailed.raw(0, lying, kThroughMailbox);
  mailed.raw(0, lying, kThroughMailbox | kOversized);
  mailed.raw(0, {}, kThroughMailbox | kNoNewRequest);
  mailed.send(0, message_type::open_mailbox, empty_payload{}).then(step::read, 0);
  mailed.send(0, message_type::release, release_first, kThroughMailbox);
  mailed.then(step::process_exit, 0);
  save("requests-through-the-mailbox", mailed);

  script hung_up;
  hung_up.greet(0);
  hung_up.send(0, message_type::open_mailbox, empty_payload{}).then(step::read, 0);
  hung_up.send(0, message_type::allocate, allocation("", 4096), kThroughMailbox);
  hung_up.then(step::disconnect, 0);
  hung_up.send(0, message_type::ping, empty_payload{}, kThroughMailbox);
  hung_up.then(step::connect, 0).then(step::hello, 0).then(step::process_exit, 0);
  save("mailbox-of-a-closed-connection", hung_up);

  script lost;
  hello_request resuming = sample<hello_request>();
  resuming.resume_client_id = 7;
  resuming.resume_token = {{0x5e55, 1}};
  lost.then(step::connect, 0).send(0, message_type::hello, resuming).then(step::read, 0);
  lost.send(0, message_type::hello, sample<hello_request>()).then(step::read, 0);
  save("resume-an-unknown-session-then-a-new-one", lost);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_FOLDER (writes CORPUS_FOLDER/codec, /request)\n",
                 argv[0]);
    return 2;
  }
  corpus codec(std::filesystem::path(argv[1]) / "codec");
  codec_seeds(codec);
  corpus requests(std::filesystem::path(argv[1]) / "request");
  request_seeds(requests);
  return 0;
}
