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

class session : public std::enable_shared_from_this<session> {
 public:
  using socket_type = boost::asio::local::stream_protocol::socket;
  using on_end = std::function<void(session&)>;

  /// Replies waiting in the daemon above which a client's next request waits until it reads.
  static constexpr std::size_t kBackpressureBytes = 64 * 1024;
  /// Events an event stream sends at a time, once everything before went out.
  static constexpr std::size_t kEventsPerBatch = 32;

  /// @param config read for max_output_bytes and frame_deadline; outlives the session.
  session(socket_type socket, books& state, request_handler& handler, const daemon_config& config,
          on_end ended);

  /// @brief Registers the connection as a new client and starts reading; call once, after
  /// construction. A hello that resumes an earlier session of the same process swaps the new
  /// row for that session's (handlers: on_hello), which the session then serves and ends.
  void start();
  /// @brief Closes the connection and releases everything the client held. Idempotent.
  void stop(const char* reason);
  /// @brief Closes the connection and keeps what the client holds: the daemon is stopping, and
  /// what a live client maps must outlive it.
  void abandon();

 private:
  enum class input_state {
    stopped,  ///< the session had to stop
    empty,    ///< every request received was answered
    partial,  ///< the start of a request is waiting for the rest
    held,     ///< complete requests wait until the client reads its replies
  };

  boost::asio::awaitable<void> read_loop();
  void end_of_stream();
  input_state handle_frames();
  /// Makes room for the rest of a frame too large for the buffer, and gives the room back
  /// once the buffer holds little.
  void size_input();
  void watch_frame_deadline(input_state state, bool consumed);
  void queue_attachment(const reply_attachment& attach, std::size_t frame_start,
                        std::uint32_t request_id);
  std::size_t pending_output() const noexcept { return out_.size() - out_sent_; }
  /// @return false when the session had to stop.
  bool flush();
  /// True, after stopping the session, when the client lets more than max_output_bytes of
  /// replies wait, in the daemon and unread in its socket.
  bool stopped_for_not_reading();
  /// The client subscribed to events with request @p request_id: they go out as replies to it.
  void stream_events(std::uint32_t request_id);
  /// Sends the events waiting for the client while its socket takes them.
  void pump_events();
  /// Whether the client's process has exited (false when it is not watched).
  bool process_exited() noexcept;
  void watch_process_exit(unique_fd pidfd);
  void wait_for_process_exit();
  void stop_for(const char* problem);

  socket_type socket_;
  boost::asio::posix::stream_descriptor process_watch_;
  boost::asio::steady_timer frame_timer_;
  books& books_;
  request_handler& handler_;
  const daemon_config& config_;
  on_end ended_;
  client_state state_;
  credentials who_;
  bool stopped_ = false;
  bool waiting_to_write_ = false;
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
};

}  // namespace gpumem::daemon
