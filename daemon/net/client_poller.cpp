#include "net/client_poller.hpp"

#include <cerrno>
#include <system_error>

#include "net/asio_reactor.hpp"
#include "net/session.hpp"

namespace gpumem::daemon {

namespace {
/// Events taken per epoll_wait; more ready connections are served at the next wake-up, which
/// comes at once (epoll keeps them ready).
constexpr std::size_t kEventsPerWakeup = 256;
constexpr std::uint32_t kInputEvents = EPOLLIN | EPOLLRDHUP | EPOLLET;
#ifdef GPUMEM_WITH_IO_URING
static_assert(kEventsPerWakeup <= io_batch::kCapacity,
              "serve_ready queues one read per ready connection on one batch");
#endif

/// An event's key, by value: epoll_event is packed, so its u64 may sit where no reference to a
/// std::uint64_t may point.
std::uint64_t key_of(const epoll_event& event) noexcept {
  return event.data.u64;
}

/// The key of Asio's reactor in the set; sessions' keys count up from 1.
constexpr std::uint64_t kAsioKey = ~std::uint64_t{0};

unique_fd make_epoll() {
  unique_fd made(::epoll_create1(EPOLL_CLOEXEC));
  if (!made) throw std::system_error(errno, std::system_category(), "epoll_create1");
  return made;
}
}  // namespace

client_poller::client_poller(boost::asio::io_context& io)
    : io_(io), set_(make_epoll()), events_(kEventsPerWakeup) {
  // Level-triggered: the reactor stays readable until Asio has taken what it reports.
  epoll_event interest{};
  interest.events = EPOLLIN;
  interest.data.u64 = kAsioKey;
  if (::epoll_ctl(set_.get(), EPOLL_CTL_ADD, asio_reactor_descriptor(io), &interest) != 0) {
    throw std::system_error(errno, std::system_category(), "epoll_ctl (Asio's reactor)");
  }
}

std::uint64_t client_poller::add(int fd, session& client, watched what) {
  const std::uint64_t key = next_key_++;
  epoll_event interest{};
  // A doorbell is never read: edge-triggered, each write to it after a wait took its last event
  // makes a new one (rings between two waits make one; the session looks for the newest
  // request, so none is missed).
  interest.events = kInputEvents;
  interest.data.u64 = key;
  if (::epoll_ctl(set_.get(), EPOLL_CTL_ADD, fd, &interest) != 0) {
    throw std::system_error(errno, std::system_category(), "epoll_ctl");
  }
  entries_.emplace(key, entry{&client, what});
  return key;
}

void client_poller::remove(std::uint64_t key, int socket) noexcept {
  if (entries_.erase(key) == 0) return;
  ::epoll_ctl(set_.get(), EPOLL_CTL_DEL, socket, nullptr);
}

bool client_poller::watch_output(std::uint64_t key, int socket, bool on) noexcept {
  epoll_event interest{};
  interest.events = on ? kInputEvents | EPOLLOUT : kInputEvents;
  interest.data.u64 = key;
  return ::epoll_ctl(set_.get(), EPOLL_CTL_MOD, socket, &interest) == 0;
}

void client_poller::serve_again(std::uint64_t key) {
  const auto found = entries_.find(key);
  if (found == entries_.end() || std::exchange(found->second.again_queued, true)) return;
  again_.push_back(key);
}

bool client_poller::flush_later(std::uint64_t key) {
  if (!in_wakeup_) return false;
  const auto found = entries_.find(key);
  if (found != entries_.end() && !std::exchange(found->second.flush_queued, true)) {
    flushes_.push_back(key);
  }
  return true;
}

void client_poller::deliver(std::uint64_t key, std::uint32_t events) {
  const auto found = entries_.find(key);
  if (found == entries_.end()) return;  // removed earlier in this wake-up
  // The session may end while it serves; it stays alive until it returns.
  const auto keep = found->second.client->shared_from_this();
  if (found->second.what == watched::doorbell) {
    keep->on_mailbox_ring();
  } else {
    keep->on_events(events);
  }
}

void client_poller::flush_queued() {
  // By index: a session that ends while writing may have others queue theirs.
  std::size_t next = 0;
#ifdef GPUMEM_WITH_IO_URING
  const auto send_batch_now = [this] {
    batch_->run([this](std::uint64_t key, std::size_t sent, std::vector<unique_fd>&,
                       const std::error_code& error) {
      const auto found = entries_.find(key);
      if (found == entries_.end()) return;
      const auto keep = found->second.client->shared_from_this();
      keep->replies_sent(sent, error);
    });
  };
  while (batch_ && flushes_.size() > 1 && (next < flushes_.size() || !batch_->empty())) {
    if (next == flushes_.size() || batch_->full()) {
      send_batch_now();
      continue;
    }
    const auto found = entries_.find(flushes_[next++]);
    if (found == entries_.end()) continue;
    found->second.flush_queued = false;
    const auto keep = found->second.client->shared_from_this();
    if (!keep->queue_replies(*batch_)) keep->flush_replies();
  }
#endif
  for (; next < flushes_.size(); ++next) {
    const auto found = entries_.find(flushes_[next]);
    if (found == entries_.end()) continue;
    found->second.flush_queued = false;
    const auto keep = found->second.client->shared_from_this();
    keep->flush_replies();
  }
  flushes_.clear();
}

void client_poller::serve_ready(int count) {
#ifdef GPUMEM_WITH_IO_URING
  if (batch_ && count > 1) {
    // Reads first, all in one submission; the sessions that do not read now are served after.
    // One read alone goes without the ring (see the header).
    batched_events_.clear();
    for (int i = 0; i < count; ++i) {
      const auto found = entries_.find(key_of(events_[i]));
      if (found != entries_.end() && found->second.what == watched::connection &&
          found->second.client->queue_receive(*batch_, events_[i].events)) {
        batched_events_.push_back(events_[i].events);
        events_[i].data.u64 = 0;  // served through the batch; no key is 0
      }
    }
    std::size_t index = 0;
    batch_->run([&](std::uint64_t key, std::size_t bytes, std::vector<unique_fd>& fds,
                    const std::error_code& error) {
      const std::uint32_t events = batched_events_[index++];
      const auto found = entries_.find(key);
      if (found == entries_.end()) return;
      const auto keep = found->second.client->shared_from_this();
      keep->received(events, bytes, fds, error);
    });
  }
#endif
  for (int i = 0; i < count; ++i) {
    if (events_[i].data.u64 != 0) deliver(events_[i].data.u64, events_[i].events);
  }
}

void client_poller::mark_ready(int count, bool ready) {
  for (int i = 0; i < count; ++i) {
    if (const auto found = entries_.find(key_of(events_[i])); found != entries_.end()) {
      found->second.ready_now = ready;
    }
  }
}

void client_poller::run() {
  // Clients are no work of Asio's: without this, a poll() that found Asio with nothing left to
  // wait for would stop the loop while clients are connected. Only stop() ends it.
  const auto keep_running = boost::asio::make_work_guard(io_);
  io_.poll();  // what was posted before the loop started
  while (!io_.stopped()) turn(-1);
}

std::size_t client_poller::run_ready() {
  const std::size_t served = turn(0);
  return served + io_.poll();  // what was posted before, whatever this turn found
}

std::size_t client_poller::turn(int timeout_ms) {
  int count;
  do {
    // A session left to serve again has input that no new event will announce: no waiting then.
    count = ::epoll_wait(set_.get(), events_.data(), static_cast<int>(events_.size()),
                         again_.empty() ? timeout_ms : 0);
  } while (count < 0 && errno == EINTR);
  if (count < 0) throw std::system_error(errno, std::system_category(), "epoll_wait");
  bool asio_ready = false;
  int clients = 0;
  for (int i = 0; i < count; ++i) {
    if (key_of(events_[i]) == kAsioKey) {
      asio_ready = true;
    } else {
      events_[clients++] = events_[i];
    }
  }
  const std::size_t served = static_cast<std::size_t>(clients) + again_.size();
  if (served != 0) serve(clients);
  // Asio's handlers: those its reactor reported, and those that serving posted (a session's
  // event pump, a cancelled wait's completion), which do not make the reactor readable: Asio
  // interrupts its reactor for a post only while a thread waits inside it, and none does.
  return served + (asio_ready || served != 0 ? io_.poll() : 0);
}

void client_poller::serve(int count) {
  in_wakeup_ = true;
  serving_again_.swap(again_);
  one_alone_ = count == 1 && serving_again_.empty();
  // A session with new events is served with them below: serving it here as well would give it
  // two shares of this wake-up. Only a client that used up its share is here, so this is rare.
  if (!serving_again_.empty()) mark_ready(count, true);
  for (const std::uint64_t key : serving_again_) {
    const auto found = entries_.find(key);
    if (found == entries_.end()) continue;
    found->second.again_queued = false;
    if (!found->second.ready_now) deliver(key, 0);
  }
  if (!serving_again_.empty()) mark_ready(count, false);
  serving_again_.clear();
  serve_ready(count);
  one_alone_ = false;
  flush_queued();
  in_wakeup_ = false;
}

}  // namespace gpumem::daemon
