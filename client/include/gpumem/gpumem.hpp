#pragma once
/// @file
/// @brief libgpumem, the C++20 client of gpumemd.
///
/// @code
///   auto client = gpumem::Client::connect();
///   gpumem::Buffer frames = client.allocate(1 << 20, {.device = gpumem::kHost, .name = "frames"});
///   std::memset(frames.data(), 7, frames.size());
///   // in another process:
///   gpumem::Buffer same = gpumem::Client::connect().open("frames");
/// @endcode
///
/// Every failure throws gpumem::Error, whose code() is in the "gpumem" category (gpumem::errc).
/// A Client and its Buffers may be used from several threads; a request is one round trip on
/// the client's socket, serialised by a mutex, that fails with errc::timed_out when the daemon
/// does not answer in time (ConnectOptions::timeout); the Client is then unusable, since a late
/// reply would answer the wrong request: connect again. When the connection breaks because
/// gpumemd restarted, a call connects again (ConnectOptions::reconnect_for), resumes the
/// session and completes; a daemon that restarted without the session's state makes it fail
/// with errc::session_lost, as every later call. A Client belongs to the process that
/// connected it: after fork(), the child connects its own.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "gpumem/export.h"
#include "gpumem/proto/errc.hpp"

struct CUstream_st;  // cudaStream_t and CUstream both point to it

namespace gpumem {

/// A CUDA stream: pass a cudaStream_t or CUstream as it is; nullptr is the default stream.
using Stream = CUstream_st*;

using errc = proto::errc;

/// Device number of the host backend (shared host memory); CUDA devices count from 0.
inline constexpr int kHost = -1;

/// @brief The libgpumem a program runs against, which can differ from the headers it was
/// built with: the shared library is found at run time.
struct Version {
  const char* release;     ///< the project's version, e.g. "0.1.0"
  std::uint16_t protocol;  ///< the version of the wire protocol it speaks to gpumemd
};
GPUMEM_API Version version() noexcept;

/// @brief The one exception type of libgpumem. code() says what failed; what() says which
/// object and why, in the daemon's words where the daemon refused.
class GPUMEM_API Error : public std::system_error {
 public:
  Error(errc code, const std::string& what) : std::system_error(make_error_code(code), what) {}
  errc status() const noexcept { return static_cast<errc>(code().value()); }
};

namespace detail {
struct call_site_access;
}

/// @brief A place in libgpumem's sources. It holds the bytes of the std::source_location the
/// library took there, one pointer, and reads them in the library: the header needs no
/// <source_location> (which clang before 15 with libstdc++, Debian 12's clang 14 among them,
/// lacks), and CudaError keeps the layout it had when it held a std::source_location.
class GPUMEM_API CallSite {
 public:
  const char* file_name() const noexcept;
  std::uint_least32_t line() const noexcept;
  const char* function_name() const noexcept;

 private:
  friend struct detail::call_site_access;
  CallSite() noexcept = default;
  alignas(void*) unsigned char site_[sizeof(void*)]{};
};

/// @brief A CUDA driver call made by libgpumem failed: code() is errc::cuda_error, and what()
/// names the call, the driver's words and where libgpumem made it.
class GPUMEM_API CudaError : public Error {
 public:
  CudaError(int cuda_status, const std::string& what, CallSite where)
      : Error(errc::cuda_error, what), cuda_status_(cuda_status), where_(where) {}
  /// The driver's CUresult, e.g. CUDA_ERROR_OUT_OF_MEMORY (an int: this header needs no cuda.h).
  int cuda_status() const noexcept { return cuda_status_; }
  /// The call's place in libgpumem's sources.
  const CallSite& where() const noexcept { return where_; }

 private:
  int cuda_status_;
  CallSite where_;
};

enum class Access { read_write, read_only };

/// Where the daemon offers it, a connection sends the requests whose reply carries no descriptor
/// through its request mailbox in shared memory rather than the socket: the same calls and
/// guarantees at less cost. $GPUMEM_MAILBOX=0 keeps everything on the socket. A call there
/// sleeps until its answer comes; $GPUMEM_ANSWER_SPIN_US=N (1 to 1000) makes it spin up to N us
/// first (a learnt budget), which saves the wake-up at the cost of CPU.
struct ConnectOptions {
  std::string socket_path{};  ///< empty: $GPUMEM_SOCKET, then the default locations
  std::string label{};        ///< shown by `gpumemctl clients`; empty: the program's name
  /// How long one request may wait for the daemon's reply (and connecting for the daemon to
  /// accept) before it fails with errc::timed_out. 0: $GPUMEM_TIMEOUT_MS, else 60 seconds. At
  /// most 10^12 ms (about 31 years), here and in the environment. Waits that take their own timeout
  /// (Lock::acquire, ...) are not round trips: unaffected.
  std::chrono::milliseconds timeout{0};
  /// How long a call whose connection broke (gpumemd restarted) tries to connect again, with
  /// pauses from 10 ms doubling to 500 ms, before it fails with errc::io_error naming the
  /// socket (a later call then tries once more). Connected again, the session is resumed and
  /// the call sent again: the daemon carries it out once. A daemon without the session's state
  /// (it restarted without its fd store, or another daemon answers) is errc::session_lost, for
  /// this call and every later one. 0: never reconnect (io_error at once). nullopt:
  /// $GPUMEM_RECONNECT_MS, else 10 seconds. At most 10^12 ms.
  std::optional<std::chrono::milliseconds> reconnect_for{};
  /// The uid gpumemd runs as: the socket, its folder and the listening process must belong to
  /// it or to root. -1: $GPUMEM_DAEMON_UID (a uid or a user name), else root, the caller's
  /// own uid or the service user `gpumemd`.
  std::int64_t daemon_uid = -1;
};

/// @brief Who else may open a named object that a call creates: rw permission bits for its
/// owner uid, its group (the creator's primary group) and others, as for a file (0600, 0640,
/// 0666; x bits are ignored). nullopt: the daemon's `access.default_mode` (0600 unless
/// configured). Opening needs r, and w too for read-write (and for any lock, barrier, channel).
using Mode = std::optional<unsigned>;

struct AllocateOptions {
  int device = kHost;
  std::string_view name{};  ///< empty: anonymous; else other processes can open() it
  std::string_view pool{};  ///< empty: the device's default pool
  /// CUDA buffers: the stream that uses the buffer first. It is made to wait for the
  /// allocation (no host synchronisation), and the destructor releases in its order.
  Stream stream = nullptr;
  Mode mode{};
};

/// How a lock or barrier is made when this call creates it.
struct SyncOptions {
  Mode mode{};
};

struct OpenOptions {
  /// Host buffers are mapped without write permission when read_only. CUDA pool memory
  /// cannot be mapped read-only by the driver; there it is a statement of intent.
  Access access = Access::read_write;
  Stream stream = nullptr;  ///< as in AllocateOptions
};

struct SlabPiece;
class Reservation;
class Lock;
class Barrier;
class Channel;
struct ChannelOptions;

namespace detail {
class connection;
}

/// @brief Memory shared through gpumemd. Move-only; the destructor lets go of it (the memory
/// itself lives on while another process holds it).
class GPUMEM_API Buffer {
 public:
  Buffer() noexcept = default;
  Buffer(Buffer&&) noexcept;
  Buffer& operator=(Buffer&&) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  /// Host buffers: an address in this process. CUDA buffers: a device pointer, usable in
  /// kernels and copies on stream() (and, after an event, on any stream of the device).
  void* data() const noexcept { return data_; }
  /// @brief Where a piece of this buffer, leased as a Slab in some process, lives here.
  /// @throws Error(invalid_argument) when the piece is of another buffer or out of bounds.
  void* at(const SlabPiece& piece) const;
  std::size_t size() const noexcept { return size_; }
  /// The daemon's id for the allocation; the same in every process that holds it.
  std::uint64_t id() const noexcept { return id_; }
  int device() const noexcept { return device_; }
  Access access() const noexcept { return access_; }
  /// The stream the buffer was allocated or opened for, where the destructor releases it.
  Stream stream() const noexcept { return stream_; }
  explicit operator bool() const noexcept { return id_ != 0; }

  /// @brief Lets go now, after the work already queued on stream(), reporting failure (the
  /// destructor swallows it). Never blocks the host on GPU work.
  /// @post !*this
  /// @throws Error when the daemon cannot be told.
  void release();
  /// @brief As release(), after the work queued on @p last_use instead.
  void release(Stream last_use);

  void swap(Buffer& other) noexcept;

 private:
  friend class detail::connection;
  std::shared_ptr<detail::connection> connection_;
  void* data_ = nullptr;
  void* mapping_ = nullptr;
  std::size_t mapping_size_ = 0;
  std::size_t size_ = 0;
  std::uint64_t id_ = 0;
  int device_ = kHost;
  Access access_ = Access::read_write;
  Stream stream_ = nullptr;
};

struct PoolStats {
  std::string name;
  std::uint32_t id = 0;
  int device = kHost;
  std::uint64_t size_limit = 0;
  std::uint64_t bytes_in_use = 0;
  std::uint64_t bytes_reserved = 0;
  std::uint64_t bytes_in_use_high = 0;
  std::uint64_t allocations = 0;
  /// CUDA pools: the driver's counters (cudaMemPoolAttrReservedMem*, UsedMem*).
  std::uint64_t driver_reserved_current = 0;
  std::uint64_t driver_reserved_high = 0;
  std::uint64_t driver_used_current = 0;
  std::uint64_t driver_used_high = 0;
};

struct Stats {
  std::vector<PoolStats> pools;
  std::uint32_t clients = 0;
  std::uint64_t allocations = 0;
  std::uint64_t uptime_ms = 0;
  std::uint32_t daemon_pid = 0;
  bool cuda = false;
  /// MPS shares the daemon's contexts: kernels of several processes run at the same time, so
  /// device-side locks hand off in about a microsecond (milliseconds without MPS).
  bool mps = false;
  std::uint32_t ipc_events_live = 0;  ///< interprocess events the daemon holds
  /// The daemon keeps its state in systemd's fd store: a restart, even a crash, loses nothing
  /// that a client holds or named. Without it a restarted daemon starts clean.
  bool state_kept = false;
};

struct ClientInfo {
  std::uint64_t id = 0;
  /// The client's process in gpumemd's PID namespace, from the kernel; 0 when the process is
  /// outside it (gpumemd in a container without the host's PID namespace).
  std::uint32_t pid = 0;
  /// The pid the client reported of itself, in its own PID namespace: for display only, as
  /// nothing checks it. 0: not reported.
  std::uint32_t reported_pid = 0;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  /// Allocations and reservations it made and holds, as the allocations quota counts them.
  std::uint32_t allocations_owned = 0;
  std::uint32_t allocations_opened = 0;  ///< allocations and reservations another client made
  /// Their bytes: an allocation's size; a reservation's committed bytes, with those of the
  /// earlier versions its readers still map and of its open draft.
  std::uint64_t bytes_owned = 0;
  std::uint64_t connected_ms = 0;
  std::string label;
};

struct AllocationInfo {
  std::uint64_t id = 0;
  std::uint64_t size = 0;
  std::uint64_t owner_client = 0;  ///< 0 once the owner let go while others still hold it
  std::uint32_t pool = 0;
  std::uint32_t holders = 0;
  std::string name;
};

/// Where a reservation is (gpumem/reservation.hpp has the reservations themselves).
enum class ReservationState {
  awake,     ///< its current version is mapped (or will be, at the next refresh)
  draining,  ///< going to sleep: holders let go at their next refresh() or quiesce()
  asleep,    ///< its bytes are on the host; nothing is mapped
  lost,      ///< its owner let go of it while it slept: it is gone
};
GPUMEM_API const char* to_string(ReservationState state) noexcept;

/// A reservation as `gpumemctl reservations` shows it.
struct ReservationInfo {
  std::uint64_t id = 0;
  std::uint64_t max_size = 0;
  std::uint64_t committed = 0;     ///< bytes of the current version, asleep or awake
  std::uint64_t owner_client = 0;  ///< 0 once the owner let go while others still hold it
  std::uint32_t holders = 0;
  int device = 0;
  std::string name;
  std::uint64_t version = 0;
  std::uint64_t draft_version = 0;   ///< 0 when no draft is being written
  std::uint64_t oldest_mapped = 0;   ///< the oldest version a holder still maps; 0: none maps any
  std::uint64_t retained_bytes = 0;  ///< chunks of older versions still mapped, and of the draft
  std::uint64_t host_bytes = 0;      ///< host memory holding its bytes while it sleeps
  ReservationState state = ReservationState::awake;
  std::uint32_t holders_current = 0;  ///< holders that map the current version
  std::uint32_t holders_behind = 0;   ///< holders that still map an older one
};

enum class SyncKind { lock, barrier, channel };
enum class ChannelRole { producer, consumer };

/// What one uid owns, against the quotas it is held to (nullopt: no limit), as `gpumemctl
/// quotas` shows it. What an object takes counts for its owner's uid while it lives.
struct UsageInfo {
  std::uint32_t uid = 0;
  std::uint64_t connections = 0;
  std::uint64_t host_bytes = 0;
  std::uint64_t device_bytes = 0;
  std::uint64_t allocations = 0;  ///< allocations and reservations
  std::uint64_t sync_objects = 0;
  std::optional<std::uint64_t> connections_limit;
  std::optional<std::uint64_t> bytes_limit;  ///< for host and GPU memory each
  std::optional<std::uint64_t> allocations_limit;
  std::optional<std::uint64_t> sync_objects_limit;
};

/// A lock, barrier or channel as `gpumemctl locks` shows it.
struct SyncInfo {
  std::uint64_t id = 0;
  SyncKind kind = SyncKind::lock;
  std::string name;
  std::string domain;  ///< "host", "stream:N", "device:N", or "unused"
  std::uint32_t parties = 0;
  std::uint32_t attached = 0;  ///< lock: clients holding it open; else parties taken
  /// Lock holder's process in gpumemd's PID namespace; 0 when free or not visible there.
  std::uint32_t owner_pid = 0;
  bool held = false;               ///< lock: someone holds it (whatever owner_pid says)
  std::uint64_t owner_client = 0;  ///< lock holder's client; 0 when free or the holder is gone
  std::uint32_t queued = 0;        ///< host lock: waiters behind the holder
  std::uint32_t owner_deaths = 0;
  std::uint32_t epoch = 0;
  bool owner_died = false;  ///< lock: the last holder died, not yet made consistent
  bool not_recoverable = false;
  bool broken = false;  ///< barrier, channel: a party died
  /// The daemon found its shared state corrupt: refused until `gpumemctl reset NAME`.
  bool corrupt = false;
};

/// @brief A session with gpumemd. Move-only; Buffers keep the session open after the Client
/// object is gone.
class GPUMEM_API Client {
 public:
  /// @throws Error(io_error) when no daemon answers at the path, with the path in what();
  /// Error(permission_denied) when the socket belongs to an unexpected uid (ConnectOptions)
  /// or its permissions refuse this user.
  static Client connect(const ConnectOptions& options = {});

  /// @throws Error: invalid_name, already_exists, no_such_device, out_of_memory, ...
  Buffer allocate(std::size_t bytes, const AllocateOptions& options = {});
  /// @throws Error(not_found) when no allocation has that name.
  Buffer open(std::string_view name, const OpenOptions& options = {});

  /// @brief One round trip that does nothing: a liveness check and a latency floor.
  void ping();

  /// @brief From now on (@p only) or no longer, this client's opens by name (open(),
  /// Reservation::open(), lock(), barrier(), channel() and its slots) join only objects its uid
  /// made: another user's object of the name is refused (permission_denied), not joined. A
  /// name is first come, first served: another user may take yours first, with a mode that
  /// lets you in, and read or write what you then put there. What a call creates is made as
  /// before. Off by default: joining another user's object by name, as its mode allows, is how
  /// users share on purpose.
  /// @throws Error(not_supported) when the daemon cannot check it (a gpumemd older than the
  /// check): it would join another user's object unasked.
  void open_own_objects_only(bool only = true);
  bool opens_own_objects_only() const noexcept;

  /// @brief The lock named @p name, made on first use (gpumem/sync.hpp).
  /// @throws Error: invalid_name, already_exists (the name is a barrier or channel).
  Lock lock(std::string_view name, const SyncOptions& options = {});
  /// @brief Joins the barrier named @p name as one of its @p parties parties.
  /// @throws Error: invalid_argument (it exists with another party count), no_party_left,
  /// wrong_state (a party died or left since the last reset: it is broken until one).
  Barrier barrier(std::string_view name, std::uint32_t parties, const SyncOptions& options = {});
  /// @brief Joins the channel named @p name as its producer or as one of its consumers; its
  /// slots are a buffer named "<name>.slots" made by whoever comes first.
  /// @throws Error: as barrier(), and invalid_argument for a shape it cannot have or slots
  /// cut otherwise than the channel's (checked by a daemon with proto::kFeatureChannelLayout);
  /// permission_denied for slots that another uid than the channel's made.
  Channel channel(std::string_view name, ChannelRole role, const ChannelOptions& options);
  std::vector<SyncInfo> sync_objects();
  /// @brief This client's uid's use and quotas; every uid's for an administrator.
  std::vector<UsageInfo> usage();
  /// @brief An operator's reset: a lock is released and usable again (a stale holder's
  /// unlock fails); a barrier or channel starts over with @p parties (0: those attached).
  void reset(std::string_view name, std::uint32_t parties = 0);

  Stats stats();
  /// @brief The daemon's metrics in the Prometheus text format (for node_exporter's textfile
  /// collector; `gpumemctl metrics`): pools, clients, objects, departures, owner deaths,
  /// reclaimed memory, requests and their latency by type, errors by code. Series per uid and
  /// per client label are every uid's for an administrator, this client's uid's otherwise.
  std::string metrics();
  std::vector<ClientInfo> clients();
  std::vector<AllocationInfo> allocations();
  std::vector<ReservationInfo> reservations();

  std::uint64_t id() const noexcept;
  const std::string& socket_path() const noexcept;

 private:
  explicit Client(std::shared_ptr<detail::connection> connection);
  friend class Reservation;

  std::shared_ptr<detail::connection> connection_;
};

}  // namespace gpumem

// Locks, barriers and channels come with the client: their types are declared there.
#include "gpumem/sync.hpp"  // IWYU pragma: export
