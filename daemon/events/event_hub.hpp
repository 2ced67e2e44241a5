#pragma once
/// @file
/// @brief daemon/events/: the events gpumemctl events streams (connects, departures, what was
/// reclaimed, owner-died hand-offs, refusals), queued per subscriber.
///
/// The books and handlers publish; each subscribed session takes what is queued for it when it
/// has room to send, so that a subscriber that reads slowly, or never, costs the daemon a
/// bounded queue and nothing else: nobody waits for it. A full queue drops what comes next and
/// counts it; a "lost" event with that count takes the place of the dropped ones once there is
/// room again. Administrators see every event; other subscribers those about their own uid.
/// Refusals are rate-limited for everyone together: a client hammering at a refusal must not
/// push every other event out. No I/O: a session is told through its waker that events wait.
/// May include: proto/ and shared/ headers, daemon/ledger/. Nothing else of the daemon.

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string_view>
#include <vector>

#include "gpumem/proto/messages.hpp"
#include "ledger/ledger.hpp"

namespace gpumem::daemon {

class event_hub {
 public:
  using clock = std::chrono::steady_clock;
  /// Events queued for one subscriber, at most; a lost marker takes one place.
  static constexpr std::size_t kQueueLength = 128;
  /// Refusal events sent per second at most, all clients together.
  static constexpr std::uint64_t kRefusalsPerSecond = 20;

  /// @brief Called on the loop when events wait for a subscriber that had none: its session
  /// schedules a take(). It must not send from within the call.
  using waker = std::function<void()>;

  /// @brief Starts queueing events for @p client. @return the `subscribed` event that answers
  /// the subscription; its sequence is the last event's so far.
  proto::event_record subscribe(client_id client, uid_t uid, bool every_uid);
  void set_waker(client_id client, waker wake);
  /// @brief Stops queueing for @p client and forgets what waits; nothing if not subscribed.
  void unsubscribe(client_id client) noexcept;

  /// @brief Numbers and stamps @p event and queues it for every subscriber that may see it.
  void publish(proto::event_record event) noexcept;
  /// @brief Publishes a refusal unless kRefusalsPerSecond went out this second; the next one
  /// sent counts those held back.
  void publish_refusal(proto::event_record event) noexcept;

  /// @brief Up to @p most events waiting for @p client, oldest first, with a lost marker
  /// where events were dropped. Appends to @p out.
  void take(client_id client, std::size_t most, std::vector<proto::event_record>& out);

  /// The last event's number so far (0: none yet).
  std::uint64_t last_sequence() const noexcept { return sequence_; }
  /// @brief Numbers the next event after @p sequence: a restarted daemon goes on from the
  /// number its predecessor wrote down, so that readers see the events they missed as a gap.
  void continue_after(std::uint64_t sequence) noexcept {
    sequence_ = std::max(sequence_, sequence);
  }
  bool subscribed(client_id client) const noexcept { return subscribers_.contains(client); }
  std::size_t subscribers() const noexcept { return subscribers_.size(); }
  std::uint64_t lost() const noexcept { return lost_; }

  /// @brief An event of @p kind about @p who (client @p client, with its label).
  static proto::event_record about(proto::event_kind kind, client_id client, const credentials& who,
                                   std::string_view label);

 private:
  struct subscriber {
    uid_t uid;
    bool every_uid;
    std::deque<proto::event_record> queue;
    std::uint64_t lost = 0;  ///< dropped since the last lost marker
    std::uint64_t last_lost_sequence = 0;
    waker wake;
  };
  void offer(subscriber& to, const proto::event_record& event);

  std::map<client_id, subscriber> subscribers_;
  std::uint64_t sequence_ = 0;
  std::uint64_t lost_ = 0;
  clock::time_point refusal_second_{};
  std::uint64_t refusals_this_second_ = 0;
  std::uint64_t refusals_held_back_ = 0;
};

}  // namespace gpumem::daemon
