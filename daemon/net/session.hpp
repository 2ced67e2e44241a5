#pragma once
/// @file
/// @brief One connected client: reads request frames, answers them in order, and ends when the
/// client's process exits or its socket closes, whichever comes first.
///
/// What a client can make the daemon hold is bounded: requests are read into a small buffer
/// that grows only for a large frame and shrinks after it; replies stop being built (and the
/// client's requests stop being read) while kBackpressureBytes of them wait to be sent; a
/// request whose first byte came more than frame_deadline ago closes the connection. A session
/// that subscribed to events sends them as further replies to the subscription, taking them from
/// its queue (events/event_hub.hpp) only once everything before them went out.
///
/// The loop's client_poller drives it: on_events when the socket has input (or output room it
/// waited for), flush_replies at the end of the wake-up, so that all the replies built for a
/// connection in one wake-up go out in one sendmsg.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "config/config.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "handlers/request_handler.hpp"
#include "net/asio.hpp"

namespace gpumem::daemon {

class client_poller;
class io_batch;
class request_mailbox;

class session : public std::enable_shared_from_this<session> {
 public:
  using on_end = std::function<void(session&)>;

  /// Replies waiting in the daemon above which a client's next request waits until it reads.
  static constexpr std::size_t kBackpressureBytes = 64 * 1024;
  /// Events an event stream sends at a time, once everything before went out.
  static constexpr std::size_t kEventsPerBatch = 32;
  /// Requests served per connection per wake-up of the loop: a client that sends faster than
  /// it is answered gets its turn again after every other ready client had one.
  static constexpr std::size_t kFramesPerWakeup = 32;

  /// @param socket a connected Unix stream socket, made non-blocking here.
  /// @param poller outlives the session, as does @p config (read for max_output_bytes and
  /// frame_deadline).
  session(unique_fd socket, client_poller& poller, books& state, request_handler& handler,
          const daemon_config& config, on_end ended);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  /// @brief Registers the connection as a new client and starts reading; call once, after
  /// construction. A hello that resumes an earlier session of the same process swaps the new
  /// row for that session's (handlers: on_hello), which the session then serves and ends.
  void start();
  /// @brief Closes the connection and releases everything the client held. Idempotent.
  void stop(const char* reason);
  /// @brief Closes the connection and keeps what the client holds: the daemon is stopping, and
  /// what a live client maps must outlive it.
  void abandon();

  /// @brief What the poller saw on the socket (epoll events), or 0: go on with the input left
  /// after this session's share of the previous wake-up.
  void on_events(std::uint32_t events);
  /// @brief Sends the replies built during this wake-up, and serves the input that waited for
  /// them to go out.
  void flush_replies();
  /// @brief The request mailbox's doorbell rang, or the poller serves it again: answers the
  /// request waiting there, if any (the answer goes out with the wake-up's replies).
  void on_mailbox_ring();
#ifdef GPUMEM_WITH_IO_URING
  /// @brief Queues this wake-up's first read on @p batch, for input @p events.
  /// @return false when the session does not read now: call on_events() instead.
  bool queue_receive(io_batch& batch, std::uint32_t events);
  /// @brief What the queued read did (with the events it was queued for); then as on_events().
  void received(std::uint32_t events, std::size_t bytes, std::vector<unique_fd>& fds,
                const std::error_code& error);
  /// @brief Queues the first sendmsg of the replies built during this wake-up on @p batch.
  /// @return false when there is nothing to queue: call flush_replies() instead.
  bool queue_replies(io_batch& batch);
  /// @brief What the queued sendmsg did; sends the rest, as flush_replies() does.
  void replies_sent(std::size_t sent, const std::error_code& error);
#endif

 private:
  enum class input_state {
    stopped,      ///< the session had to stop
    empty,        ///< every request received was answered
    partial,      ///< the start of a request is waiting for the rest
    held,         ///< complete requests wait until the client reads its replies
    over_budget,  ///< kFramesPerWakeup served: the rest waits for the next wake-up
  };

  /// Reads and answers requests until the socket is empty, the input is held or this
  /// wake-up's share is spent.
  void serve_input();
  /// One recvmsg. @return false when reading ends here (the session stopped or the stream ended).
  bool receive();
  /// Applies what a recvmsg into the @p room free bytes of in_ did; as receive().
  bool apply_received(std::size_t room, std::size_t received, const std::error_code& error);
  /// Notes what epoll reported; sends what waited for room.
  void note_events(std::uint32_t events);
  void end_of_stream();
  void close_socket() noexcept;
  input_state handle_frames(std::size_t& budget);
  /// Makes room for the rest of a frame too large for the buffer, and gives the room back
  /// once the buffer holds little.
  void size_input();
  void watch_frame_deadline(input_state state, bool consumed);
  void queue_attachment(const reply_attachment& attach, std::size_t frame_start,
                        std::uint32_t request_id);
  /// Makes the mailbox open_mailbox's reply at @p frame_start announces and attaches it, or
  /// turns that reply into the error that stopped it.
  void open_mailbox(std::size_t frame_start, std::uint32_t request_id);
  void close_mailbox() noexcept;
  /// Answers the request in mailbox_in_ into mailbox_out_.
  void handle_mailbox_request();
  /// Puts the answer built in mailbox_out_ in the mailbox.
  void answer_mailbox();
  std::size_t pending_output() const noexcept {
    return out_.size() - out_sent_;
  }
  /// @brief Writes the books' changes down, sends the replies, then starts the background
  /// work the requests left (books::start_deferred_work()).
  /// @return false when the session had to stop or its connection closed.
  bool flush();
  /// @return false when the session had to stop or its connection closed.
  bool send_output();
  /// End of the bytes the next sendmsg carries: up to the next reply with descriptors, which
  /// travel with its first byte. @p fd_count: the descriptors that go with this one.
  std::size_t segment_end(std::size_t& fd_count) const noexcept;
  /// Applies what a sendmsg of the next segment did. @return false when sending stops here:
  /// the session stopped, or waits for room in the socket.
  bool record_sent(std::size_t fd_count, std::size_t sent, const std::error_code& error);
  /// Sends the replies now, or at the end of the wake-up when in one.
  void flush_soon();
  /// The socket has room for the replies that waited for it.
  void writable();
  /// True, after stopping the session, when the client lets more than max_output_bytes of
  /// replies wait, in the daemon and unread in its socket.
  bool stopped_for_not_reading();
  /// The client subscribed to events with request @p request_id: they go out as replies to it.
  void stream_events(std::uint32_t request_id);
  /// Sends the events waiting for the client while its socket takes them.
  void pump_events();
  /// Whether the client's process has exited (false when it is not watched).
  bool process_exited() noexcept;
  /// Whether the client's library said it closed of its own accord (proto::kClosingCleanly).
  bool closed_cleanly() noexcept;
  void watch_process_exit(unique_fd pidfd);
  void wait_for_process_exit();
  void stop_for(const char* problem);
  /// @brief Sends the refusal already in the replies, then stop_for(@p problem). A hang-up the
  /// reply meets on the way is not the end of a stream whose live process keeps what it holds:
  /// the stop takes it all.
  void reply_then_stop_for(const char* problem);

  unique_fd socket_;
  client_poller& poller_;
  std::uint64_t poller_key_ = 0;
  boost::asio::posix::stream_descriptor process_watch_;
  boost::asio::steady_timer frame_timer_;
  books& books_;
  request_handler& handler_;
  const daemon_config& config_;
  on_end ended_;
  client_state state_;
  credentials who_;
  bool stopped_ = false;
  /// The client's library said, in the mailbox, that it closed of its own accord: its departure
  /// is a disconnect even if its process has exited by then. Kept once read (closed_cleanly()),
  /// as the mailbox goes with the socket.
  bool closed_cleanly_ = false;
  /// The replies being sent are the last: stop_for() follows (reply_then_stop_for()).
  bool stopping_ = false;
  bool waiting_to_write_ = false;
  /// Everything the socket held was read: only a new input event brings more.
  bool drained_ = true;
  /// The client shut its side down (or the socket failed): read on to the end of the stream.
  bool hung_up_ = false;
  /// Complete requests wait until pending_output() falls below kBackpressureBytes.
  bool input_held_ = false;
  std::vector<unique_fd> received_fds_;  ///< only ever non-empty for a misbehaving client
  /// Since when the partial request at the front of in_ has been waiting for its rest.
  std::chrono::steady_clock::time_point partial_since_{};
  bool partial_ = false;
  std::optional<std::uint32_t> event_request_;  ///< the subscription's request, once subscribed
  bool pump_posted_ = false;

  std::vector<std::byte> in_;
  std::size_t in_filled_ = 0;
  std::vector<std::byte> out_;
  std::size_t out_sent_ = 0;
  struct queued_fd {
    std::size_t offset;  ///< first byte of the frame the descriptor travels with
    unique_fd fd;
  };
  std::vector<queued_fd> out_fds_;  // a vector: an empty deque costs 600 bytes
  std::unique_ptr<request_mailbox> mailbox_;
  std::uint64_t mailbox_key_ = 0;
  std::vector<std::byte> mailbox_in_;   ///< the request, copied out of the shared slot
  std::vector<std::byte> mailbox_out_;  ///< its answer until flush(); empty: none is due
#ifdef GPUMEM_WITH_IO_URING
  /// How many descriptors the sendmsg queued on an io_batch carries, until it went out.
  std::size_t batched_fd_count_ = 0;
#endif
};

}  // namespace gpumem::daemon
