#pragma once
/// @file
/// @brief The connection to gpumemd: request/reply round trips, one at a time, through the
/// request mailbox (proto/mailbox.hpp) when the daemon offers one and the reply carries no
/// descriptor, else on the socket; and the rule that
/// a process forked from the one that connected never talks on its parent's socket, a daemon
/// that stops answering fails the call after the timeout, a socket of an untrusted uid is
/// never spoken to, and a connection that breaks (the daemon restarted) is made again and
/// the session resumed, the call in flight sent again.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "gpumem/proto/codec.hpp"
#include "gpumem/shared/sync/spin_budget.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "request_mailbox.hpp"

namespace gpumem::detail {

class transport {
 public:
  /// @brief Connects and says hello.
  /// @throws Error(io_error) naming the path when nobody answers there; Error(permission_denied)
  /// when the socket, its folder or the listening process belong to an untrusted uid;
  /// Error(timed_out) when the daemon does not accept or answer in time.
  explicit transport(const ConnectOptions& options);
  /// Closes the connection, saying so first in the mailbox when this is the process that
  /// connected (a forked child's copy shares the parent's mailbox, and says nothing).
  ~transport();
  transport(const transport&) = delete;
  transport& operator=(const transport&) = delete;

  /// @brief The kFeature* bits of the last hello's answer (connect or resume).
  std::uint32_t daemon_features() const noexcept {
    return daemon_features_.load(std::memory_order_relaxed);
  }
  /// @brief How many hellos the daemon answered on this session (the connect and each resume):
  /// what a holder learnt from shared pages before a change of it may be out of date, since a
  /// restarted daemon may have dropped what it could not re-adopt.
  std::uint64_t greetings() const noexcept { return greetings_.load(std::memory_order_relaxed); }

  /// @brief One round trip. Throws Error with the daemon's code and text when it refuses,
  /// Error(bad_message) or Error(unexpected_handle) when its reply breaks the protocol, and
  /// Error(timed_out) when it does not answer within the timeout (and on every later call: the
  /// late reply would answer the wrong request). When the connection breaks, connects again
  /// for up to ConnectOptions::reconnect_for, resumes the session and sends the request again
  /// with its id (the daemon answers a request it already carried out from its records):
  /// Error(io_error) naming the socket when the daemon stays away, Error(session_lost) when
  /// the daemon that answers no longer has the session (and on every later call).
  template <class Reply, class Request>
  Reply call(proto::message_type type, const Request& request,
             std::vector<unique_fd>* fds = nullptr) {
    std::lock_guard lock(mutex_);
    out_.clear();
    proto::append_frame(out_, static_cast<std::uint16_t>(type), ++last_request_id_, request);
    std::vector<unique_fd> received;
    const proto::frame_view frame = exchange(type, received);
    Reply reply{};
    if (auto error = proto::decode_payload(frame.payload, reply)) {
      throw Error(errc::bad_message,
                  std::string("gpumemd sent a malformed reply: ") + error.message());
    }
    if (fds != nullptr) *fds = std::move(received);
    return reply;
  }

  /// @brief Hands the connection over to a stream of replies (an event subscription): the
  /// transport makes no call after this.
  /// @return the socket, greeted, and the id for the stream's request.
  std::pair<unique_fd, std::uint32_t> hand_over();

  /// @brief False in a child forked after connecting: the socket, and everything the session
  /// holds, are the parent's.
  bool in_owner_process() const noexcept;
  /// The process that connected.
  pid_t owner_pid() const noexcept { return owner_pid_; }
  /// The daemon's id for this session.
  std::uint64_t client_id() const noexcept { return client_id_; }
  /// @brief The uid of the process that answers on the socket (SO_PEERCRED at connect).
  uid_t daemon_uid() const noexcept { return daemon_uid_; }
  const std::string& path() const noexcept { return path_; }

 private:
  using clock = std::chrono::steady_clock;
  proto::frame_view exchange(proto::message_type type, std::vector<unique_fd>& fds);
  /// Sends @p request and waits for its reply (the frame, still unchecked).
  /// @return nullopt, with the cause in @p broke, when the connection broke on the way.
  std::optional<proto::frame_view> round_trip(std::span<const std::byte> request,
                                              std::vector<unique_fd>& fds, std::string& broke);
  /// As round_trip(), through the mailbox; the socket is only watched for the daemon's end.
  std::optional<proto::frame_view> mailbox_round_trip(std::span<const std::byte> request,
                                                      std::string& broke);
  /// Asks for the connection's mailbox when the daemon offers one and it is wanted; goes on
  /// without one when the daemon refuses. @return false, with the cause in @p broke, when the
  /// connection broke on the way.
  bool open_mailbox(std::string& broke);
  /// Whether the daemon closed the connection (polled, never waits).
  bool hung_up() const noexcept;
  /// Lets go of the connection: the socket and its mailbox.
  void drop_connection() noexcept;
  /// Throws what the daemon's refusal says, or what is wrong with the reply.
  void check_reply(const proto::frame_view& frame, proto::message_type type,
                   const std::vector<unique_fd>& fds) const;
  /// Connects to path_ and says hello, resuming the session when it has one.
  /// @return false, with the cause in @p broke, when the connection broke during hello.
  bool greet(std::string& broke);
  /// Connects again until the session is resumed, or throws once @p give_up has passed.
  void reconnect(clock::time_point give_up, std::string broke);
  /// Ends the session here for good: this call and every later one throw session_lost.
  [[noreturn]] void lose_session(const std::string& why);
  void check_owner_process() const;
  void check_in_step() const;
  void check_session() const;
  /// Waits until the socket is ready for @p events or throws Error(timed_out) at @p deadline.
  void wait_for(short events, clock::time_point deadline, const char* doing);
  /// Marks the stream out of step and throws Error(timed_out) for what the daemon did not do.
  [[noreturn]] void time_out(const char* doing);

  unique_fd socket_;                        ///< empty while the connection is broken
  std::optional<request_mailbox> mailbox_;  ///< the connection's, when it has one
  std::string path_;
  std::vector<uid_t> trusted_;
  proto::wire_name label_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds reconnect_for_;
  bool mailbox_wanted_;  ///< $GPUMEM_MAILBOX is not 0
  /// How long a call spins for its answer in the mailbox before it sleeps, at most
  /// $GPUMEM_ANSWER_SPIN_US (answer_spin_from_env in transport.cpp).
  sync::spin_budget answer_spin_;
  bool timed_out_ = false;  ///< a reply is missing: the stream is out of step for good
  /// The daemon stayed away for all of reconnect_for_: later calls try to reconnect once each.
  bool gave_up_ = false;
  std::string lost_;  ///< why the session is gone; empty while it lives
  pid_t owner_pid_;
  std::uint64_t fork_generation_;
  std::uint64_t client_id_ = 0;
  proto::session_token token_{};
  std::uint64_t daemon_instance_ = 0;
  uid_t daemon_uid_ = 0;
  std::atomic<std::uint32_t> daemon_features_ = 0;  ///< read outside the mutex
  std::atomic<std::uint64_t> greetings_ = 0;        ///< read outside the mutex
  std::mutex mutex_;
  std::uint32_t last_request_id_ = 0;
  std::vector<std::byte> out_;
  std::vector<std::byte> in_;
};

}  // namespace gpumem::detail
