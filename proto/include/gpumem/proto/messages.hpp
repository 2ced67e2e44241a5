#pragma once
/// @file
/// @brief Every message of protocol version 4: payload layouts and the table that names them.
///
/// Version 4 over 3: a client reports its own pid at hello (hello_request::client_pid, shown in
/// client_record::client_pid), and a sync_record says whether a lock is held and by which
/// client (kHeld, owner_client_id), which a daemon in its own PID namespace cannot say by pid.
///
/// A reply carries the request's type with kReplyBit set and the request's id; a failed request
/// is answered by an `error` message instead. Layouts are frozen: a change means a new version.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumem/proto/wire.hpp"

namespace gpumem::proto {

/// Device number of the host backend (shared host memory); CUDA devices count from 0.
inline constexpr std::int32_t kHostDevice = -1;

/// Feature bits in hello_reply::features and stats_head::features.
inline constexpr std::uint32_t kFeatureCuda = 1u << 0;
/// The daemon's CUDA contexts are MPS clients: kernels of several processes run concurrently.
inline constexpr std::uint32_t kFeatureMps = 1u << 1;
/// The daemon keeps its state in systemd's fd store across restarts.
inline constexpr std::uint32_t kFeatureStateKept = 1u << 2;
/// The daemon honours kFlagSendPage in open_sync: a client sets the flag only when hello's
/// reply says so, so that clients and daemons of either side of this change work together.
inline constexpr std::uint32_t kFeatureSendsSyncPage = 1u << 3;
/// The daemon answers open_mailbox: a connection may send its requests through shared memory
/// (proto/mailbox.hpp).
inline constexpr std::uint32_t kFeatureMailbox = 1u << 4;
/// The daemon answers open_channel: it keeps each channel's slot layout and refuses an opener
/// that asks for another (a client without the feature opens channels with open_sync, unchecked).
inline constexpr std::uint32_t kFeatureChannelLayout = 1u << 5;
/// The daemon honours kFlagOwnOnly (an older one ignores it: a client sends it only to a daemon
/// that says so, and refuses the call otherwise).
inline constexpr std::uint32_t kFeatureOwnOnly = 1u << 6;

enum class access_mode : std::uint32_t { read_write = 0, read_only = 1 };

/// Creation flags of allocate, reserve and open_sync: with kFlagModeGiven, the low nine bits
/// are the new object's permission bits (rw for owner, group and others, as for a file; the x
/// bits are ignored). Without it the daemon's configured default mode applies.
inline constexpr std::uint32_t kFlagModeGiven = 1u << 31;
inline constexpr std::uint32_t kFlagModeBits = 0777;
constexpr std::uint32_t mode_flags(std::uint32_t mode) noexcept {
  return kFlagModeGiven | (mode & kFlagModeBits);
}
constexpr bool valid_creation_flags(std::uint32_t flags) noexcept {
  return (flags & ~(kFlagModeGiven | kFlagModeBits)) == 0 &&
         ((flags & kFlagModeGiven) != 0 || flags == 0);
}
/// open_sync and open_channel only, beside the creation flags: send the object's page with the
/// reply unless the client has it mapped (its own page, attach_sync's, or one it has another
/// object open on), so that it needs no get_sync_page round trip.
inline constexpr std::uint32_t kFlagSendPage = 1u << 30;
/// open, open_reservation, open_sync and open_channel: open only an object that the opener's
/// uid made; another user's of that name is refused, not joined. A name another user took
/// first (with a mode that lets others in) is then no way into the opener's work.
inline constexpr std::uint32_t kFlagOwnOnly = 1u << 29;

struct empty_payload {};

/// 128 random bits the daemon gives a session at hello: whoever shows them (with the session's
/// uid and process) may resume the session on a new connection after the daemon restarted.
struct session_token {
  std::uint64_t words[2];

  bool empty() const noexcept { return (words[0] | words[1]) == 0; }
};
static_assert(sizeof(session_token) == 16);

struct hello_request {
  std::uint32_t protocol_version;
  /// The client's pid in its own PID namespace, as it says: shown to operators beside the pid
  /// the kernel gives the daemon (0 when the client is outside the daemon's PID namespace),
  /// never trusted for any decision. 0: not reported.
  std::uint32_t client_pid;
  wire_name client_label;  ///< free text shown by gpumemctl clients; may be empty
  /// Both zero for a new session. Else the session to carry on, as an earlier hello_reply named
  /// it: refused with errc::session_lost when the daemon no longer has it.
  std::uint64_t resume_client_id;
  session_token resume_token;
};
static_assert(sizeof(hello_request) == 96);
static_assert(offsetof(hello_request, resume_client_id) == 72);
static_assert(offsetof(hello_request, resume_token) == 80);

struct hello_reply {
  std::uint64_t client_id;
  std::uint32_t pool_count;
  std::uint32_t max_payload_size;
  std::uint32_t daemon_pid;
  std::uint32_t features;
  session_token token;  ///< what a hello that resumes this session shows
  /// The daemon's identity: drawn at a clean start, kept when a restarted daemon takes its
  /// predecessor's state over. Pool, page and object ids mean the same only under one instance.
  std::uint64_t daemon_instance;
};
static_assert(sizeof(hello_reply) == 48);
static_assert(offsetof(hello_reply, token) == 24);
static_assert(offsetof(hello_reply, daemon_instance) == 40);

struct get_pool_request {
  std::uint32_t pool_id;
  std::uint32_t reserved;
};
static_assert(sizeof(get_pool_request) == 8);

inline constexpr std::size_t kCudaHandleSize = 64;  ///< CU_IPC_HANDLE_SIZE

/// Sent with exactly one fd: the pool's shareable handle, of the type the header names.
struct pool_reply {
  std::uint32_t pool_id;
  std::int32_t device;
  std::uint64_t size_limit;
  wire_name name;
  /// CUDA pools: the IPC handle of the pool's ready event. The daemon records it after each
  /// allocation, on the one stream it allocates on, so waiting on it after receiving a grant
  /// orders the waiter after that allocation. Zero for host pools.
  std::uint8_t ready_event[kCudaHandleSize];
};
static_assert(sizeof(pool_reply) == 144);

struct allocate_request {
  std::uint64_t size;
  std::int32_t device;
  std::uint32_t flags;  ///< creation flags (kFlagModeGiven), or zero
  wire_name name;       ///< empty for an anonymous allocation
  wire_name pool;       ///< empty for the device's default pool
};
static_assert(sizeof(allocate_request) == 144);
static_assert(offsetof(allocate_request, name) == 16);

struct open_request {
  wire_name name;
  access_mode access;
  std::uint32_t flags;  ///< kFlagOwnOnly, or zero
};
static_assert(sizeof(open_request) == 72);

struct allocation_reply {
  std::uint64_t alloc_id;
  std::uint64_t offset;  ///< host pools: the range's offset in the pool's memfd
  std::uint64_t size;
  std::uint32_t pool_id;
  access_mode access;
  /// CUDA pools: the CUmemPoolPtrExportData to import the pointer with. Zero for host pools.
  std::uint8_t pointer_export[kCudaHandleSize];
};
static_assert(sizeof(allocation_reply) == 96);

/// release_request::flags
inline constexpr std::uint32_t kReleaseHasEvent = 1u << 0;

struct release_request {
  std::uint64_t alloc_id;
  std::uint32_t flags;
  std::uint32_t reserved;
  /// With kReleaseHasEvent: the IPC handle of an event the client recorded after its last use
  /// (and after freeing its import); the daemon frees only after that event. The client keeps
  /// the event, undestroyed, for as long as its connection lasts, and records it anew for each
  /// release that sends its handle: the daemon opens a handle once per connection and waits on
  /// that opening for every later release that sends the same handle. A destroyed event's
  /// handle may come back, byte for byte, for another event of the client's.
  std::uint8_t released_event[kCudaHandleSize];
};
static_assert(sizeof(release_request) == 80);

/// Pagination for the list requests: records with an id greater than after_id.
struct list_request {
  std::uint64_t after_id;
};
static_assert(sizeof(list_request) == 8);

struct list_head {
  std::uint32_t count;  ///< records that follow
  std::uint32_t more;   ///< 1 when another page follows: ask again after the last id
};
static_assert(sizeof(list_head) == 8);

struct stats_head {
  std::uint32_t count;  ///< pool_stats records that follow
  std::uint32_t client_count;
  std::uint64_t uptime_ms;
  std::uint32_t daemon_pid;
  std::uint32_t features;
  std::uint64_t allocation_count;
  std::uint32_t ipc_events_live;  ///< interprocess events the daemon holds now
  std::uint32_t reserved;
};
static_assert(sizeof(stats_head) == 40);

struct pool_stats {
  wire_name name;
  std::uint32_t pool_id;
  std::int32_t device;
  std::uint64_t size_limit;
  std::uint64_t bytes_in_use;    ///< sum of live allocation sizes, from the daemon's books
  std::uint64_t bytes_reserved;  ///< backing memory held, including rounding
  std::uint64_t bytes_in_use_high;
  std::uint64_t allocations;
  /// CUDA pools: what the driver says (cudaMemPoolAttr*), beside the daemon's books above.
  std::uint64_t driver_reserved_current;
  std::uint64_t driver_reserved_high;
  std::uint64_t driver_used_current;
  std::uint64_t driver_used_high;
};
static_assert(sizeof(pool_stats) == 144);

struct client_record {
  std::uint64_t client_id;
  std::uint32_t pid;  ///< from the kernel, in the daemon's PID namespace; 0: not visible there
  std::uint32_t uid;
  std::uint32_t gid;
  std::uint32_t allocations_owned;   ///< allocations and reservations, as quotas count them
  std::uint32_t allocations_opened;  ///< allocations and reservations another client made
  std::uint32_t client_pid;          ///< what the client reported at hello (untrusted); 0: nothing
  std::uint64_t bytes_owned;
  std::uint64_t connected_ms;
  wire_name label;
};
static_assert(sizeof(client_record) == 112);

struct allocation_record {
  std::uint64_t alloc_id;
  std::uint64_t size;
  std::uint64_t owner_client_id;  ///< 0 once the owner has let go while others still hold it
  std::uint32_t pool_id;
  std::uint32_t holders;  ///< clients holding it, owner included
  wire_name name;
};
static_assert(sizeof(allocation_record) == 96);

inline constexpr std::size_t kErrorTextCapacity = 240;
struct error_reply {
  std::uint32_t code;  ///< an errc
  std::uint32_t reserved;
  char text[kErrorTextCapacity];  ///< NUL-terminated, printable
};
static_assert(sizeof(error_reply) == 248);

/// A reservation: a virtual range backed by physical chunks (VMM chunks on a GPU, memfds on the
/// host) that every holder maps at the same offsets of its own reserved range. Its contents come
/// in versions: holders map the current one; the owner writes the next one (a draft) in fresh
/// chunks and commits it, and each holder switches at its next refresh. It can be put to sleep
/// (bytes to host memory the daemon owns, chunks freed) and woken (new chunks, same offsets).
struct reserve_request {
  std::uint64_t max_size;      ///< the virtual range; rounded up to the chunk size
  std::uint64_t initial_size;  ///< committed at once; rounded up to the chunk size
  std::int32_t device;         ///< a CUDA device, or kHostDevice
  std::uint32_t flags;         ///< creation flags (kFlagModeGiven), or zero
  wire_name name;              ///< empty for an anonymous reservation
};
static_assert(sizeof(reserve_request) == 88);

/// What holders of a reservation are to map.
enum class reservation_state : std::uint32_t {
  awake = 0,     ///< the current version's chunks
  draining = 1,  ///< going to sleep: map nothing, and say so (get_chunks or quiesce)
  asleep = 2,    ///< bytes on the host, no chunks: map nothing
  lost = 3,      ///< its owner let go of it while it slept: gone for good
};
inline constexpr std::uint32_t kReservationStates = 4;
constexpr const char* to_string(reservation_state state) noexcept {
  constexpr const char* kNames[kReservationStates] = {"awake", "draining", "asleep", "lost"};
  const auto index = static_cast<std::uint32_t>(state);
  return index < kReservationStates ? kNames[index] : "unknown";
}

/// Sent by reserve and open_reservation with one fd: the reservation's notice page, a sealed
/// memfd that holders map read-only (gpumem/shared/reservation_notice.hpp).
struct reservation_reply {
  std::uint64_t reservation_id;
  std::uint64_t max_size;
  std::uint64_t committed;  ///< bytes of `version` (of the draft, for begin_version)
  std::uint64_t chunk_size;
  std::int32_t device;  ///< a CUDA device, or kHostDevice
  access_mode access;
  std::uint64_t version;  ///< the current version (the draft's, for begin_version)
};
static_assert(sizeof(reservation_reply) == 48);

/// Commits or decommits chunks at the end so that `committed` bytes are backed (owner only; only
/// while no version was committed after the first: committed versions do not change).
struct resize_request {
  std::uint64_t reservation_id;
  std::uint64_t committed;
};
static_assert(sizeof(resize_request) == 16);

/// Which chunks get_chunks asks for.
enum class chunk_set : std::uint32_t {
  current = 0,  ///< the current version's: the holder maps them (or nothing) from now on
  draft = 1,    ///< the owner's draft
};

/// Asks for the chunks from index `first` on; the reply carries one fd per record. A request
/// for `first` > 0 names the version the earlier pages came from, and is refused with
/// errc::wrong_state when that version is no longer the one asked for: start again from 0.
struct chunks_request {
  std::uint64_t reservation_id;
  std::uint32_t first;
  chunk_set which;
  std::uint64_t version;  ///< 0 with first == 0
};
static_assert(sizeof(chunks_request) == 24);

struct chunks_head {
  std::uint32_t count;  ///< records (and fds) that follow
  std::uint32_t more;   ///< 1 when chunks follow from first + count
  std::uint64_t committed_chunks;
  std::uint64_t version;
  reservation_state state;
  std::uint32_t generation;  ///< the notice page's generation this answer reflects
};
static_assert(sizeof(chunks_head) == 32);

struct chunk_record {
  std::uint64_t chunk_id;  ///< never reused: a different id at an index is a different chunk
  std::uint64_t index;
};
static_assert(sizeof(chunk_record) == 16);

struct reservation_release_request {
  std::uint64_t reservation_id;
};
static_assert(sizeof(reservation_release_request) == 8);

/// The owner starts writing the version after the current one, of `size` bytes (rounded up to
/// chunks, at most the reservation's max_size). One draft at a time.
struct begin_version_request {
  std::uint64_t reservation_id;
  std::uint64_t size;
};
static_assert(sizeof(begin_version_request) == 16);

/// Commit: the draft `version` becomes the current version. Abandon: its chunks are freed.
struct version_request {
  std::uint64_t reservation_id;
  std::uint64_t version;
};
static_assert(sizeof(version_request) == 16);

/// A reservation named by id (which the asker holds) or, with id 0, by name (an operator's
/// sleep, wake or status: the owner uid or an administrator).
struct reservation_target {
  std::uint64_t reservation_id;
  wire_name name;
};
static_assert(sizeof(reservation_target) == 72);

/// With kSleepDiscard the bytes are dropped instead of copied: the reservation wakes zeroed.
inline constexpr std::uint32_t kSleepDiscard = 1u << 0;
/// Holders get `deadline_ms` to let go of their mappings; 0 means the daemon's default.
struct sleep_request {
  reservation_target target;
  std::uint32_t flags;
  std::uint32_t deadline_ms;
};
static_assert(sizeof(sleep_request) == 80);

/// Where a reservation is, and how its last sleep or wake ended. Sleep and wake answer at once;
/// the caller watches `generation` (on the notice page, or by asking again) for the outcome.
inline constexpr std::size_t kReasonCapacity = 192;
struct reservation_status {
  std::uint64_t reservation_id;
  std::uint64_t version;
  std::uint64_t committed;   ///< bytes of the current version, asleep or awake
  std::uint64_t host_bytes;  ///< host memory holding its bytes while it sleeps
  reservation_state state;
  std::uint32_t generation;
  std::uint32_t busy;   ///< 1 while a sleep or wake is under way
  std::uint32_t error;  ///< the errc the last sleep or wake failed with (`reason` says why), or 0
  char reason[kReasonCapacity];  ///< NUL-terminated, printable
};
static_assert(sizeof(reservation_status) == 240);

struct reservation_record {
  std::uint64_t reservation_id;
  std::uint64_t max_size;
  std::uint64_t committed;        ///< bytes of the current version
  std::uint64_t owner_client_id;  ///< 0 once the owner let go while others still hold it
  std::uint32_t holders;
  std::int32_t device;
  wire_name name;
  std::uint64_t version;
  std::uint64_t draft_version;   ///< 0 when no draft is being written
  std::uint64_t oldest_mapped;   ///< the oldest version a holder still maps (0: none maps any)
  std::uint64_t retained_bytes;  ///< chunks of older versions and of the draft
  std::uint64_t host_bytes;      ///< bytes kept on the host while asleep
  reservation_state state;
  std::uint32_t holders_current;  ///< holders mapping the current version
  std::uint32_t holders_behind;   ///< holders mapping an older version
  std::uint32_t reserved;
};
static_assert(sizeof(reservation_record) == 160);

/// Locks, barriers and channels: named objects whose state lives on shared pages.
enum class sync_kind : std::uint32_t { lock = 1, barrier = 2, channel = 3 };
/// Which party of a channel: its producer (party 0) or one of its consumers.
enum class sync_role : std::uint32_t { party = 0, producer = 1, consumer = 2 };

/// Sync state lives on pages, one per access class (owner uid, and the group or others when the
/// mode lets them use the object): a client gets only pages of classes whose objects it may use.
/// A cell is named across pages by its id, page * cell_count + its index on the page.
///
/// Sent with one fd: the page of this client's own objects, those it makes with the daemon's
/// default mode (a sealed memfd of cell_size * cell_count bytes), kept while it is attached.
struct sync_attach_reply {
  std::uint32_t slot;  ///< this client's number in lock words and queue entries, on every page
  std::uint32_t cell_size;
  std::uint32_t cell_count;
  std::uint32_t page;  ///< the id of the page sent
};
static_assert(sizeof(sync_attach_reply) == 16);

struct sync_open_request {
  wire_name name;
  sync_kind kind;
  std::uint32_t parties;  ///< barrier: parties; channel: consumers + 1; lock: 0
  sync_role role;
  /// Creation flags (kFlagModeGiven), or zero, used when it creates; kFlagSendPage and
  /// kFlagOwnOnly.
  std::uint32_t flags;
};
static_assert(sizeof(sync_open_request) == 80);

/// Sent with the page's fd when the request has kFlagSendPage and the client has not mapped the
/// page (see kFlagSendPage); without one otherwise.
struct sync_open_reply {
  std::uint32_t cell;   ///< the cell's id: page * cell_count + its index on the page
  std::uint32_t party;  ///< this opener's counter (barriers, channels)
  std::uint32_t parties;
  std::uint32_t page;  ///< the page the cell is on
};
static_assert(sizeof(sync_open_reply) == 16);

/// How a channel's slots buffer is cut: the same total size can hold other slots, which a
/// party that assumed them would read at the wrong offsets.
struct channel_layout {
  std::uint64_t slot_bytes;
  std::uint32_t slots;
  std::uint32_t reserved;  ///< zero
};
static_assert(sizeof(channel_layout) == 16);

/// open_sync of a channel (kind channel) that also names its layout: the first opener's is kept
/// with the channel, and an opener that asks for another is refused before it takes a place.
struct channel_open_request {
  sync_open_request open;
  channel_layout layout;
};
static_assert(sizeof(channel_open_request) == 96);

struct sync_close_request {
  std::uint32_t cell;  ///< the cell's id, as open_sync gave it
  std::uint32_t party;
};
static_assert(sizeof(sync_close_request) == 8);

/// An operator's reset: a lock is released and made usable again; a barrier or channel
/// starts over with `parties` parties (0: those still attached).
struct sync_reset_request {
  wire_name name;
  std::uint32_t parties;
  std::uint32_t reserved;
};
static_assert(sizeof(sync_reset_request) == 72);

struct sync_record {
  /// In flags: the daemon found the object's cell corrupt and refuses it until a reset.
  static constexpr std::uint32_t kCorrupt = 1u << 31;
  /// In flags, for a lock: someone holds it (owner_client_id says who, when a client does).
  static constexpr std::uint32_t kHeld = 1u << 30;

  std::uint64_t sync_id;
  sync_kind kind;
  std::uint32_t cell;      ///< the cell's id (page * cell_count + index)
  std::uint32_t domain;    ///< gpumem::sync::domain
  std::uint32_t parties;   ///< barriers and channels
  std::uint32_t attached;  ///< clients holding it open (lock) or parties taken
  std::uint32_t flags;     ///< lock: lock_word flags; counters: counter_cell state; kCorrupt
  /// Lock holder's process in the daemon's PID namespace; 0 when free or not visible there
  /// (kHeld tells which).
  std::uint32_t owner_pid;
  std::uint32_t queued;  ///< lock: tickets waiting behind the holder
  std::uint32_t owner_deaths;
  std::uint32_t epoch;
  wire_name name;
  /// Lock holder's client; 0 when free, or held by a client that is gone (its death is being
  /// repaired).
  std::uint64_t owner_client_id;
};
static_assert(sizeof(sync_record) == 120);
static_assert(offsetof(sync_record, owner_client_id) == 112);

/// The signal page of one (host) page on one device: its cells have the host page's indices.
struct signal_page_request {
  std::int32_t device;
  std::uint32_t page;
};
static_assert(sizeof(signal_page_request) == 8);

/// Sent with one fd: the VMM chunk of the signal page.
struct signal_page_reply {
  std::uint64_t size;
  std::int32_t device;
  std::uint32_t cell_size;
};
static_assert(sizeof(signal_page_reply) == 16);

/// A page other than the one attach_sync sent: answered not_found unless the client may use
/// the objects of the page's class.
struct sync_page_request {
  std::uint32_t page;
  std::uint32_t reserved;
};
static_assert(sizeof(sync_page_request) == 8);

/// Sent with one fd: the page, as attach_sync sends its own.
struct sync_page_reply {
  std::uint32_t page;
  std::uint32_t cell_size;
  std::uint32_t cell_count;
  std::uint32_t reserved;
};
static_assert(sizeof(sync_page_reply) == 16);

/// What one uid owns and the quota it is held to; kNoLimit where no quota applies.
inline constexpr std::uint64_t kNoLimit = ~std::uint64_t{0};
struct usage_record {
  std::uint32_t uid;
  std::uint32_t reserved;
  std::uint64_t connections;
  std::uint64_t host_bytes;
  std::uint64_t device_bytes;
  std::uint64_t memory_objects;  ///< allocations and reservations
  std::uint64_t sync_objects;
  std::uint64_t connections_limit;
  std::uint64_t bytes_limit;  ///< per device kind
  std::uint64_t memory_objects_limit;
  std::uint64_t sync_objects_limit;
};
static_assert(sizeof(usage_record) == 80);

/// What an event of subscribe_events tells.
enum class event_kind : std::uint32_t {
  subscribed = 0,    ///< the first reply: from here on, events follow
  connected = 1,     ///< a client said hello
  disconnected = 2,  ///< a client's connection ended while its process lived on
  died = 3,          ///< a client's process exited while it was a client
  reclaimed = 4,     ///< after disconnected or died: what the client owned, let go of
  owner_died = 5,    ///< a lock's holder died holding it: the next holder is told so
  refused = 6,       ///< a request or connection was refused (permission or quota)
  lost = 7,          ///< this subscriber read too slowly: `count` events were dropped here
};
inline constexpr std::uint32_t kEventKinds = 8;
constexpr const char* to_string(event_kind kind) noexcept {
  constexpr const char* kNames[kEventKinds] = {"subscribed", "connected",  "disconnected", "died",
                                               "reclaimed",  "owner_died", "refused",      "lost"};
  const auto index = static_cast<std::uint32_t>(kind);
  return index < kEventKinds ? kNames[index] : "unknown";
}

/// In the subscribed event's flags: the subscriber sees every uid's events (an administrator);
/// otherwise only those of its own uid.
inline constexpr std::uint32_t kEventsOfEveryUid = 1u << 0;

/// One event. subscribe_events is answered with a `subscribed` event, then once per event, each
/// a reply to the same request, until the connection ends. Fields a kind does not use are zero.
struct event_record {
  std::uint64_t sequence;  ///< the daemon's count of events, from 1 (subscribed: the last so far)
  std::uint64_t time_ms;   ///< when, in milliseconds since the Unix epoch
  event_kind kind;
  std::uint32_t flags;  ///< subscribed: kEventsOfEveryUid
  std::uint64_t client_id;
  std::uint32_t pid;
  std::uint32_t uid;
  std::uint64_t bytes;  ///< reclaimed: bytes the client owned
  /// reclaimed: objects the client owned; lost: events dropped; refused: like refusals held
  /// back since the last one sent (refusal events are rate-limited)
  std::uint64_t count;
  std::uint32_t code;          ///< refused: the errc
  std::uint16_t request_type;  ///< refused: the message type refused
  std::uint16_t reserved;
  wire_name label;   ///< the client's label
  wire_name object;  ///< owner_died: the lock
  /// refused: the rule's reason; owner_died: how a live holder let go (empty for a death).
  /// NUL-terminated, printable
  char reason[kReasonCapacity];
};
static_assert(sizeof(event_record) == 384);
static_assert(offsetof(event_record, code) == 56);
static_assert(offsetof(event_record, label) == 64);
static_assert(offsetof(event_record, reason) == 192);

/// get_metrics: the daemon's metrics as Prometheus text, rendered once and read in pages. A
/// request with `snapshot` 0 renders anew and answers from offset 0; later pages name the
/// snapshot and the offset to go on from, and are refused with errc::wrong_state when the
/// session rendered another one since: start again from 0.
struct metrics_request {
  std::uint64_t snapshot;
  std::uint32_t offset;
  std::uint32_t reserved;
};
static_assert(sizeof(metrics_request) == 16);

struct metrics_head {
  std::uint64_t snapshot;  ///< the rendering these bytes are of
  std::uint32_t total;     ///< bytes of the whole text
  std::uint32_t offset;    ///< where these bytes start in it
  std::uint32_t count;     ///< bytes that follow
  std::uint32_t more;      ///< 1 when bytes follow from offset + count
};
static_assert(sizeof(metrics_head) == 24);

/// A payload that is a head followed by `head.count` fixed records.
template <class Head, class Record>
struct list_payload {
  static constexpr std::size_t kMaxRecords = (kMaxPayloadSize - sizeof(Head)) / sizeof(Record);
  Head head{};
  std::vector<Record> records;
};

using stats_reply = list_payload<stats_head, pool_stats>;
using client_list_reply = list_payload<list_head, client_record>;
using allocation_list_reply = list_payload<list_head, allocation_record>;
using chunks_reply = list_payload<chunks_head, chunk_record>;
using reservation_list_reply = list_payload<list_head, reservation_record>;
using sync_list_reply = list_payload<list_head, sync_record>;
using usage_list_reply = list_payload<list_head, usage_record>;
/// The text's bytes: printable ASCII and newlines.
using metrics_reply = list_payload<metrics_head, char>;

/// open_mailbox's reply, with two descriptors (handle_type::mailbox): the mailbox's memfd, of
/// `bytes` bytes (kMailboxBytes), and its doorbell, an eventfd.
struct mailbox_reply {
  std::uint32_t bytes;
  std::uint32_t reserved;  ///< zero
};
static_assert(sizeof(mailbox_reply) == 8);

/// Table value for a reply that carries one descriptor per record.
inline constexpr std::uint16_t kFdPerRecord = 0xffff;
/// Table value for a reply that carries one descriptor or none.
inline constexpr std::uint16_t kFdAtMostOne = 0xfffe;

// X(name, id, request payload, reply payload, reply fd count, what it is for)
#define GPUMEM_MESSAGE_TABLE(X)                                                               \
  X(hello, 1, hello_request, hello_reply, 0, "open a session")                                \
  X(ping, 2, empty_payload, empty_payload, 0, "round trip with no work")                      \
  X(get_pool, 3, get_pool_request, pool_reply, 1, "fetch one pool's shareable handle")        \
  X(allocate, 4, allocate_request, allocation_reply, 0, "allocate from a pool")               \
  X(open, 5, open_request, allocation_reply, 0, "open a named allocation")                    \
  X(release, 6, release_request, empty_payload, 0, "let go of an allocation")                 \
  X(stats, 7, empty_payload, stats_reply, 0, "pool and client statistics")                    \
  X(list_clients, 8, list_request, client_list_reply, 0, "connected clients")                 \
  X(list_allocations, 9, list_request, allocation_list_reply, 0, "live allocations")          \
  X(reserve, 10, reserve_request, reservation_reply, 1, "make a reservation")                 \
  X(open_reservation, 11, open_request, reservation_reply, 1, "open a named reservation")     \
  X(resize_reservation, 12, resize_request, reservation_reply, 0, "commit or decommit")       \
  X(get_chunks, 13, chunks_request, chunks_reply, kFdPerRecord, "a reservation's chunks")     \
  X(release_reservation, 14, reservation_release_request, empty_payload, 0, "let go of one")  \
  X(list_reservations, 15, list_request, reservation_list_reply, 0, "live reservations")      \
  X(attach_sync, 16, empty_payload, sync_attach_reply, 1, "the lock and barrier page")        \
  X(open_sync, 17, sync_open_request, sync_open_reply, kFdAtMostOne,                          \
    "open a lock, barrier, channel")                                                          \
  X(close_sync, 18, sync_close_request, empty_payload, 0, "let go of one")                    \
  X(reset_sync, 19, sync_reset_request, empty_payload, 0, "operator reset of one")            \
  X(list_sync, 20, list_request, sync_list_reply, 0, "locks, barriers and channels")          \
  X(get_signal_page, 21, signal_page_request, signal_page_reply, 1, "a page's signal page")   \
  X(get_sync_page, 22, sync_page_request, sync_page_reply, 1, "a lock and barrier page")      \
  X(list_usage, 30, list_request, usage_list_reply, 0, "use and quotas per uid")              \
  X(begin_version, 31, begin_version_request, reservation_reply, 0, "start the next version") \
  X(commit_version, 32, version_request, reservation_reply, 0, "make the draft current")      \
  X(abandon_version, 33, version_request, empty_payload, 0, "drop the draft")                 \
  X(quiesce_reservation, 34, reservation_release_request, empty_payload, 0, "maps nothing")   \
  X(sleep_reservation, 35, sleep_request, reservation_status, 0, "put one to sleep")          \
  X(wake_reservation, 36, reservation_target, reservation_status, 0, "wake one")              \
  X(get_reservation_status, 37, reservation_target, reservation_status, 0, "where one is")    \
  X(subscribe_events, 38, empty_payload, event_record, 0, "stream the daemon's events")       \
  X(get_metrics, 39, metrics_request, metrics_reply, 0, "metrics as Prometheus text")         \
  X(open_mailbox, 40, empty_payload, mailbox_reply, 2, "requests through shared memory")      \
  X(open_channel, 41, channel_open_request, sync_open_reply, kFdAtMostOne,                    \
    "open a channel of a given layout")

inline constexpr std::uint16_t kReplyBit = 0x8000;

enum class message_type : std::uint16_t {
#define GPUMEM_X(name, id, request, reply, fds, summary) name = id,
  GPUMEM_MESSAGE_TABLE(GPUMEM_X)
#undef GPUMEM_X
      error = 0x7fff,
};

constexpr std::uint16_t reply_type(message_type request) noexcept {
  return static_cast<std::uint16_t>(static_cast<std::uint16_t>(request) | kReplyBit);
}

/// What the table says about one message type, for code that iterates over all of them.
struct message_info {
  message_type type;
  const char* name;
  std::uint16_t reply_fds;
};

inline constexpr message_info kMessages[] = {
#define GPUMEM_X(name, id, request, reply, fds, summary) {message_type::name, #name, fds},
    GPUMEM_MESSAGE_TABLE(GPUMEM_X)
#undef GPUMEM_X
};

/// @return the table entry for a request type, or nullptr when @p raw names none.
const message_info* find_request(std::uint16_t raw) noexcept;

}  // namespace gpumem::proto
