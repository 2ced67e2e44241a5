#pragma once
/// @file
/// @brief One connected client: reads request frames, answers them in order, and ends when the
/// client's process exits or its socket closes, whichever comes first.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "gpumem/shared/unique_fd.hpp"
#include "handlers/request_handler.hpp"
#include "net/asio.hpp"

namespace gpumem::daemon {

class session : public std::enable_shared_from_this<session> {
 public:
  using socket_type = boost::asio::local::stream_protocol::socket;
  using on_end = std::function<void(session&)>;

  session(socket_type socket, books& state, request_handler& handler,
          std::uint64_t max_output_bytes, on_end ended);

  /// @brief Registers the client and starts reading; call once, after construction.
  void start();
  /// @brief Closes the connection and releases everything the client held. Idempotent.
  void stop(const char* reason);

 private:
  boost::asio::awaitable<void> read_loop();
  void end_of_stream();
  /// @return false when the session had to stop.
  bool handle_frames();
  void queue_attachment(const reply_attachment& attach, std::size_t frame_start,
                        std::uint32_t request_id);
  /// @return false when the session had to stop.
  bool flush();
  void watch_process_exit(unique_fd pidfd);
  void wait_for_process_exit();

  socket_type socket_;
  boost::asio::posix::stream_descriptor process_watch_;
  books& books_;
  request_handler& handler_;
  std::uint64_t max_output_bytes_;
  on_end ended_;
  client_state state_;
  bool stopped_ = false;
  bool waiting_to_write_ = false;

  std::vector<std::byte> in_;
  std::size_t in_filled_ = 0;
  std::vector<std::byte> out_;
  std::size_t out_sent_ = 0;
  struct queued_fd {
    std::size_t offset;  ///< first byte of the frame the descriptor travels with
    unique_fd fd;
  };
  std::deque<queued_fd> out_fds_;
};

}  // namespace gpumem::daemon
