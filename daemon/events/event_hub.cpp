#include "events/event_hub.hpp"

#include <new>
#include <utility>

namespace gpumem::daemon {

namespace {
std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}
}  // namespace

proto::event_record event_hub::about(proto::event_kind kind, client_id client,
                                     const credentials& who, std::string_view label) {
  proto::event_record event{};
  event.kind = kind;
  event.client_id = client;
  event.pid = static_cast<std::uint32_t>(who.pid);
  event.uid = who.uid;
  (void)proto::make_wire_name(label, event.label);
  return event;
}

proto::event_record event_hub::subscribe(client_id client, uid_t uid, bool every_uid) {
  subscriber& added = subscribers_[client];
  added.uid = uid;
  added.every_uid = every_uid;
  proto::event_record subscribed{};
  subscribed.sequence = sequence_;
  subscribed.time_ms = now_ms();
  subscribed.kind = proto::event_kind::subscribed;
  subscribed.flags = every_uid ? proto::kEventsOfEveryUid : 0;
  subscribed.client_id = client;
  subscribed.uid = uid;
  return subscribed;
}

void event_hub::set_waker(client_id client, waker wake) {
  const auto found = subscribers_.find(client);
  if (found == subscribers_.end()) return;
  found->second.wake = std::move(wake);
  if (!found->second.queue.empty()) found->second.wake();
}

void event_hub::unsubscribe(client_id client) noexcept {
  subscribers_.erase(client);
}

void event_hub::publish(proto::event_record event) noexcept {
  event.sequence = ++sequence_;
  event.time_ms = now_ms();
  for (auto& [client, each] : subscribers_) {
    if (each.every_uid || each.uid == event.uid) offer(each, event);
  }
}

void event_hub::publish_refusal(proto::event_record event) noexcept {
  const auto now = clock::now();
  if (now - refusal_second_ >= std::chrono::seconds(1)) {
    refusal_second_ = now;
    refusals_this_second_ = 0;
  }
  if (refusals_this_second_ == kRefusalsPerSecond) {
    ++refusals_held_back_;
    return;
  }
  ++refusals_this_second_;
  event.count = std::exchange(refusals_held_back_, 0);
  publish(event);
}

void event_hub::offer(subscriber& to, const proto::event_record& event) {
  // A lost marker must fit before the event once events were dropped, so that the order the
  // subscriber reads is the order they happened in.
  const std::size_t needed = to.lost > 0 ? 2 : 1;
  if (to.queue.size() + needed > kQueueLength) {
    ++to.lost;
    ++lost_;
    to.last_lost_sequence = event.sequence;
    return;
  }
  const bool was_empty = to.queue.empty();
  try {
    if (to.lost > 0) {
      proto::event_record marker{};
      marker.sequence = to.last_lost_sequence;
      marker.time_ms = event.time_ms;
      marker.kind = proto::event_kind::lost;
      marker.count = std::exchange(to.lost, 0);
      to.queue.push_back(marker);
    }
    to.queue.push_back(event);
    if (was_empty && to.wake) to.wake();
  } catch (const std::bad_alloc&) {
    ++to.lost;
    ++lost_;
  }
}

void event_hub::take(client_id client, std::size_t most, std::vector<proto::event_record>& out) {
  const auto found = subscribers_.find(client);
  if (found == subscribers_.end()) return;
  subscriber& from = found->second;
  for (; most > 0 && !from.queue.empty(); --most) {
    out.push_back(from.queue.front());
    from.queue.pop_front();
  }
  if (most > 0 && from.queue.empty() && from.lost > 0) {
    proto::event_record marker{};
    marker.sequence = from.last_lost_sequence;
    marker.time_ms = now_ms();
    marker.kind = proto::event_kind::lost;
    marker.count = std::exchange(from.lost, 0);
    out.push_back(marker);
  }
}

}  // namespace gpumem::daemon
