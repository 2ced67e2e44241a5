#pragma once
/// @file
/// @brief The daemon's loop: an epoll set of the clients' connections and doorbells, with Asio's
/// reactor inside it (net/asio_reactor.hpp), on which the loop's thread waits.
///
/// A ring or a request wakes the loop straight from this set: one epoll_wait, as in a bare
/// server. (With the set inside Asio's reactor instead, a request cost one epoll_wait more, an
/// epoll_ctl that Asio makes to wait on a descriptor again, and a wake-up through two epoll
/// instances: about 1 us more a round trip on the 2-core development VM.) Asio runs its handlers
/// (accepts, signals, timers, process exits, posted work) once its reactor reports something,
/// and after every wake-up that served a client, which may have posted some. The daemon's other
/// threads wake the loop through a descriptor (net/loop_wakeup.hpp), never by posting.
///
/// Each connection is registered once, edge-triggered for input (output only while a reply
/// waits for room), so a request costs no epoll_ctl. A wake-up of the loop serves every ready
/// connection (each at most session::kFramesPerWakeup requests, so one client's flood cannot hold
/// the others), and only then writes each connection's replies, one sendmsg per connection as a
/// rule (more where the socket takes part of them, or a reply carries descriptors, or a client
/// pipelines more than its input buffer holds): the clients woken by the replies do not preempt
/// the loop before it has served the rest. With
/// io_uring (net/io_batch.hpp), the reads of a wake-up with several ready connections take one
/// system call, and so do its replies; one connection's read and reply go as a recvmsg and a
/// sendmsg, which cost the loop less than the ring's submission and completion of one each.

#include <sys/epoll.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "gpumem/shared/unique_fd.hpp"
#include "net/asio.hpp"
#ifdef GPUMEM_WITH_IO_URING
#include "net/io_batch.hpp"
#endif

namespace gpumem::daemon {

class session;

class client_poller {
 public:
  /// @throws std::system_error or std::runtime_error when the set cannot be made or Asio's
  /// reactor cannot be put in it.
  explicit client_poller(boost::asio::io_context& io);
  client_poller(const client_poller&) = delete;
  client_poller& operator=(const client_poller&) = delete;

  boost::asio::io_context& context() const noexcept { return io_; }

  /// @brief Runs the loop until the io_context is stopped (server::shut_down), whether or not
  /// Asio has work left.
  /// @throws what a handler or a session throws, as io_context::run() would.
  void run();
  /// @brief One turn of the loop that waits for nothing: serves what is ready now, then runs
  /// Asio's ready handlers. For tests that drive the loop themselves (a stopped io_context runs
  /// no handlers: restart it first).
  /// @return how many connections and handlers were served.
  std::size_t run_ready();

  /// What a watched descriptor is to its session.
  enum class watched {
    connection,  ///< the socket: its events go to session::on_events
    doorbell,    ///< the request mailbox's eventfd: each ring goes to session::on_mailbox_ring
  };
  /// @brief Watches @p fd for @p client until remove(); readiness already there is reported.
  /// @return the key the session names it by in the calls below.
  /// @throws std::system_error when epoll refuses the descriptor.
  std::uint64_t add(int fd, session& client, watched what = watched::connection);
  /// @brief Stops watching; call before the socket closes. Events already taken are dropped.
  void remove(std::uint64_t key, int socket) noexcept;
  /// @brief Reports output room to the session (EPOLLOUT) while @p on.
  /// @return false when epoll refused the change (ENOMEM).
  bool watch_output(std::uint64_t key, int socket, bool on) noexcept;
  /// @brief Serves the session again at the next wake-up, with no new event: it stopped at its
  /// share of this one with input left.
  void serve_again(std::uint64_t key);
  /// @brief Whether the session being served is the only one of this wake-up, so that its
  /// reply is the next thing the loop does: worth waking its client before handling it
  /// (session::on_mailbox_ring). With more, the replies wait for all of them, and every early
  /// wake-up would cost the loop one futex wake more.
  bool serving_one_alone() const noexcept { return one_alone_; }
  /// @brief Has the session's replies written at the end of this wake-up.
  /// @return false outside a wake-up: the caller writes now.
  bool flush_later(std::uint64_t key);

 private:
  struct entry {
    session* client;
    watched what = watched::connection;
    bool again_queued = false;
    bool flush_queued = false;
    bool ready_now = false;  ///< has events in this wake-up (set only while serving again)
  };
  /// Waits up to @p timeout_ms for events, serves the clients', then runs Asio's handlers when
  /// its reactor had any or a client was served (serving may post some).
  /// @return how many connections and handlers were served.
  std::size_t turn(int timeout_ms);
  /// Serves the first @p count of events_ (none of them Asio's) and the sessions served again.
  void serve(int count);
  void deliver(std::uint64_t key, std::uint32_t events);
  void flush_queued();
  /// Sets ready_now of the sessions with events in this wake-up's first @p count.
  void mark_ready(int count, bool ready);
  /// Serves the ready connections; with a batch, makes their first reads in one system call.
  void serve_ready(int count);

  boost::asio::io_context& io_;
  unique_fd set_;  ///< the epoll instance the loop waits on
  std::unordered_map<std::uint64_t, entry> entries_;
  std::uint64_t next_key_ = 1;
  std::vector<epoll_event> events_;
  std::vector<std::uint64_t> again_;
  std::vector<std::uint64_t> serving_again_;
  std::vector<std::uint64_t> flushes_;
  bool in_wakeup_ = false;
  bool one_alone_ = false;  ///< serving_one_alone()
#ifdef GPUMEM_WITH_IO_URING
  std::unique_ptr<io_batch> batch_ = io_batch::make();  ///< null: the kernel refuses io_uring
  std::vector<std::uint32_t> batched_events_;           ///< the events each queued read answers
#endif
};

}  // namespace gpumem::daemon
