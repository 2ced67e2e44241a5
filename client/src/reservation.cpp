#include "gpumem/reservation.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "chunk_mapping.hpp"
#include "connection.hpp"
#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/reservation_notice.hpp"
#include "gpumem/shared/sync/futex.hpp"
#include "gpumem/shared/sync/nap.hpp"
#include "gpumem/shared/sync/signals_end_waits.hpp"
#include "range_mapper.hpp"
#include "reservation_state.hpp"
#include "wire_names.hpp"

namespace gpumem {

using proto::message_type;

namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// What a sleep may take beyond the holders' deadline: the copy itself (32 GiB take about 1 s).
constexpr auto kCopyMargin = std::chrono::seconds(120);
/// The daemon's deadline for holders when the caller gives none.
constexpr auto kDefaultSleepDeadline = std::chrono::seconds(5);
/// While waiting on the notice page, how long before asking the daemon anyway: the page's words
/// are hints, and a wake-up can be missed between asking and sleeping.
constexpr auto kNoticeRecheck = milliseconds(50);
/// Without a notice page, the pauses between asks grow from the first to the last.
constexpr auto kFirstPoll = milliseconds(1);
constexpr auto kLastPoll = milliseconds(20);

ReservationStatus to_status(const proto::reservation_status& status) {
  return {.id = status.reservation_id,
          .version = status.version,
          .committed = status.committed,
          .host_bytes = status.host_bytes,
          .state = detail::to_state(status.state),
          .busy = status.busy != 0,
          .error = static_cast<errc>(status.error),
          .reason = status.reason};
}

proto::reservation_target target_of(std::uint64_t reservation_id) {
  return {reservation_id, {}};
}

proto::reservation_target target_named(std::string_view name) {
  return {0, detail::checked_name(name, "reservation name")};
}

/// How errors name a target.
std::string describe(const proto::reservation_target& target) {
  if (target.reservation_id == 0) return "reservation '" + std::string(target.name.view()) + "'";
  return "reservation " + std::to_string(target.reservation_id);
}

proto::sleep_request sleep_request_for(const proto::reservation_target& target,
                                       const SleepOptions& options) {
  if (options.deadline.count() < 0) {
    throw Error(errc::invalid_argument, "a sleep's deadline cannot be negative");
  }
  const auto deadline_ms = static_cast<std::uint32_t>(
      std::min<std::int64_t>(options.deadline.count(), std::numeric_limits<std::uint32_t>::max()));
  return {target, options.discard ? proto::kSleepDiscard : 0u, deadline_ms};
}

/// How long a caller waits for a sleep to end: the holders' deadline, then the copy.
milliseconds sleep_wait_limit(const SleepOptions& options) {
  const milliseconds deadline =
      options.deadline.count() == 0 ? kDefaultSleepDeadline : options.deadline;
  return deadline + kCopyMargin;
}

/// @brief Waits until the sleep or wake that @p status answered has ended, watching @p notice
/// where the caller maps it and asking the daemon again and again otherwise.
/// @return the status it ended with.
/// @throws Error with the daemon's code and reason when it failed; Error(timed_out) when it
/// is still under way after @p limit, or when a signal cut a sleep of the wait short and
/// sync::signals_end_waits says that ends it (Python's Ctrl-C): the sleep or wake goes on.
proto::reservation_status await_outcome(detail::connection& session,
                                        const proto::reservation_target& target,
                                        proto::reservation_status status,
                                        const reservation_notice* notice, milliseconds limit,
                                        const char* what, proto::reservation_state wanted) {
  const auto give_up = clock::now() + limit;
  milliseconds pause = kFirstPoll;
  // The generation is read before each ask, so that a change after it ends the wait at once.
  std::uint32_t seen = status.generation;
  while (status.busy != 0) {
    const auto now = clock::now();
    if (now >= give_up) {
      throw Error(errc::timed_out, std::string(what) + " of " + describe(target) +
                                       " did not end within " + std::to_string(limit.count()) +
                                       " ms; it goes on in gpumemd");
    }
    const auto remaining = std::chrono::duration_cast<milliseconds>(give_up - now);
    bool signalled = false;
    if (notice != nullptr) {
      signalled = sync::futex_wait(&notice->generation, seen, std::min(kNoticeRecheck, remaining));
      seen = notice_generation(*notice);
    } else {
      signalled = sync::nap(std::min(pause, remaining));
      pause = std::min(pause * 2, kLastPoll);
    }
    if (signalled && sync::signals_end_waits::signal_ends_wait()) {
      throw Error(errc::timed_out, std::string(what) + " of " + describe(target) +
                                       ": a signal ended the wait; the " + what +
                                       " goes on in gpumemd");
    }
    status = session.call<proto::reservation_status>(message_type::get_reservation_status, target);
  }
  if (status.error != 0) {
    throw Error(static_cast<errc>(status.error),
                std::string(what) + " of " + describe(target) + " failed: " + status.reason);
  }
  // Ended without an error but not where it was to go: a gpumemd that restarted during it
  // starts from where it was before (its copy was not complete), or another process asked for
  // the opposite since. A sleep whose owner has let go ends lost, its memory freed as asked.
  const bool lost_asleep =
      wanted == proto::reservation_state::asleep && status.state == proto::reservation_state::lost;
  if (status.state != wanted && !lost_asleep) {
    throw Error(errc::wrong_state,
                std::string(what) + " of " + describe(target) + " did not take effect: it is " +
                    proto::to_string(status.state) + " (gpumemd restarted during the " + what +
                    ", or another process changed it since); ask again");
  }
  return status;
}

/// @throws Error(permission_denied) when @p handle was opened read-only: the daemon knows the
/// owner by its client, and a read-only handle in the owner's client is the owner's to it.
void refuse_if_read_only(const Reservation& handle, const char* change) {
  if (handle.access() == Access::read_only) {
    throw Error(errc::permission_denied, "reservation " + std::to_string(handle.id()) +
                                             " was opened read-only here, so this handle may not " +
                                             change + " it");
  }
}

os::mapping map_notice(const std::vector<unique_fd>& fds) {
  if (fds.size() != 1) {
    throw Error(errc::unexpected_handle, "gpumemd sent a reservation without its notice page");
  }
  std::error_code error;
  os::mapping page =
      os::mapping::share(fds[0].get(), kReservationNoticeBytes, os::access::read_only, 0, error);
  if (error) throw Error(errc::io_error, "mapping a reservation's notice page: " + error.message());
  return page;
}

}  // namespace

const char* to_string(ReservationState state) noexcept {
  switch (state) {
    case ReservationState::awake:
      return "awake";
    case ReservationState::draining:
      return "draining";
    case ReservationState::asleep:
      return "asleep";
    case ReservationState::lost:
      return "lost";
  }
  return "unknown";
}

/// One holder's view: the grant, the notice page, and the current version mapped in the range.
struct Reservation::impl {
  std::shared_ptr<detail::connection> session;
  proto::reservation_reply granted;  ///< id, sizes, device and access; the rest as of the grant
  os::mapping notice_page;
  detail::chunk_mapping mapped;
  std::uint64_t version;
  ReservationState state = ReservationState::awake;
  std::uint32_t answered_generation = 0;  ///< the notice generation of the daemon's last answer
  /// The session's greetings at the daemon's last answer: after a restart the notice page may be
  /// one the new daemon could not re-adopt, which nobody updates, so the next refresh asks.
  std::uint64_t answered_greetings = 0;
  bool must_ask = true;  ///< the next refresh asks, whatever the page shows
  /// Drafts neither committed nor abandoned. Their handles may outlive this reservation (a C
  /// program may release it first): they are closed with it, so that none reaches it afterwards.
  std::vector<ReservationDraft::impl*> open_drafts;

  impl(std::shared_ptr<detail::connection> link, const proto::reservation_reply& grant,
       const std::vector<unique_fd>& fds)
      : session(std::move(link)),
        granted(grant),
        notice_page(map_notice(fds)),
        mapped(detail::reserve_range(grant.device, grant.max_size, grant.chunk_size),
               grant.max_size / grant.chunk_size),
        version(grant.version) {}
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;
  ~impl();

  /// Maps a grant the daemon just made; a failure gives it back.
  static std::unique_ptr<impl> adopt(const std::shared_ptr<detail::connection>& link,
                                     const proto::reservation_reply& grant,
                                     const std::vector<unique_fd>& fds) {
    try {
      auto self = std::make_unique<impl>(link, grant, fds);
      self->refresh();
      return self;
    } catch (...) {
      link->call<proto::empty_payload>(message_type::release_reservation,
                                       proto::reservation_release_request{grant.reservation_id});
      throw;
    }
  }

  const reservation_notice& notice() const noexcept {
    return *static_cast<const reservation_notice*>(notice_page.get());
  }
  std::uint64_t id() const noexcept { return granted.reservation_id; }
  std::size_t size() const noexcept { return mapped.count() * granted.chunk_size; }
  /// Committed versions never change: only version 1 is mapped as the grant allows.
  Access access_to(std::uint64_t mapped_version) const noexcept {
    return mapped_version == 1 && granted.access == proto::access_mode::read_write
               ? Access::read_write
               : Access::read_only;
  }

  std::size_t refresh() {
    if (!must_ask && notice_generation(notice()) == answered_generation &&
        session->greetings() == answered_greetings) {
      return size();
    }
    const std::uint64_t greetings = session->greetings();
    detail::chunk_listing listing;
    try {
      listing = detail::list_chunks(*session, id(), proto::chunk_set::current);
    } catch (const Error& error) {
      if (error.status() == errc::not_found) lose();
      throw;
    }
    if (listing.head.state == proto::reservation_state::lost) {
      lose();
      throw Error(errc::not_found, "reservation " + std::to_string(id()) +
                                       " is lost: its owner let go of it while it slept");
    }
    mapped.apply(listing, access_to(listing.head.version));
    version = listing.head.version;
    state = detail::to_state(listing.head.state);
    answered_generation = listing.head.generation;
    // Read before asking: a resume during the call makes the next refresh ask again.
    answered_greetings = greetings;
    must_ask = false;
    return size();
  }

  /// The reservation is gone: nothing of it stays mapped here.
  void lose() {
    must_ask = true;
    state = ReservationState::lost;
    mapped.clear();
  }

  void quiesce() {
    must_ask = true;
    mapped.clear();
    session->call<proto::empty_payload>(message_type::quiesce_reservation,
                                        proto::reservation_release_request{id()});
  }
};

/// The owner's draft: its chunks mapped writable in a range of their own.
struct ReservationDraft::impl {
  Reservation::impl* owner;  ///< while open; nullptr once committed, abandoned or orphaned
  std::uint64_t version;
  std::size_t size;
  detail::chunk_mapping mapped;
  bool orphaned = false;  ///< closed because its reservation was released first

  impl(Reservation::impl& reservation, const proto::reservation_reply& draft)
      : owner(&reservation),
        version(draft.version),
        size(draft.committed),
        mapped(detail::reserve_range(reservation.granted.device, reservation.granted.max_size,
                                     reservation.granted.chunk_size),
               reservation.granted.max_size / reservation.granted.chunk_size) {
    reservation.open_drafts.push_back(this);
  }
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;
  ~impl() { close(); }

  bool open() const noexcept { return owner != nullptr; }
  /// Committed or abandoned: the reservation no longer knows this draft.
  void close() noexcept {
    if (owner != nullptr) std::erase(owner->open_drafts, this);
    owner = nullptr;
  }
  /// The reservation is being released: its chunks must not be used any more. The range stays
  /// reserved until the draft goes, so a stale data() faults.
  void orphan() noexcept {
    mapped.clear();
    owner = nullptr;
    orphaned = true;
  }

  void map() {
    mapped.apply(detail::list_chunks(*owner->session, owner->id(), proto::chunk_set::draft),
                 Access::read_write);
  }
};

Reservation::impl::~impl() {
  for (ReservationDraft::impl* draft : open_drafts) draft->orphan();
}

Reservation Reservation::create(Client& client, std::size_t max_bytes,
                                const ReserveOptions& options) {
  if (max_bytes == 0 || options.initial > max_bytes) {
    const std::string which = options.name.empty()
                                  ? std::string("a reservation")
                                  : "reservation '" + std::string(options.name) + "'";
    throw Error(errc::invalid_argument,
                which + " of " + std::to_string(max_bytes) + " bytes at most and " +
                    std::to_string(options.initial) +
                    " committed at first: it needs 0 < max_bytes and initial <= max_bytes");
  }
  detail::require_backend(options.device);  // before asking the daemon for anything
  const proto::reserve_request request{
      max_bytes, options.initial, options.device, detail::creation_flags(options.mode),
      detail::checked_name_or_none(options.name, "reservation name")};
  auto session = client.connection_;
  std::vector<unique_fd> fds;
  const auto grant = session->call<proto::reservation_reply>(message_type::reserve, request, &fds);
  return Reservation(impl::adopt(session, grant, fds));
}

Reservation Reservation::open(Client& client, std::string_view name,
                              const OpenReservationOptions& options) {
  proto::open_request request{};
  request.name = detail::checked_name(name, "reservation name");
  request.access = options.access == Access::read_only ? proto::access_mode::read_only
                                                       : proto::access_mode::read_write;
  auto session = client.connection_;
  request.flags = session->open_flags();
  std::vector<unique_fd> fds;
  // The device is known only now: adopt() gives the grant back when it cannot be mapped here.
  const auto grant =
      session->call<proto::reservation_reply>(message_type::open_reservation, request, &fds);
  return Reservation(impl::adopt(session, grant, fds));
}

std::shared_ptr<detail::connection> Reservation::session_of(Client& client) {
  return client.connection_;
}

void* Reservation::data() const noexcept {
  return self_->mapped.base();
}
std::size_t Reservation::size() const noexcept {
  return self_->size();
}
std::size_t Reservation::max_size() const noexcept {
  return self_->granted.max_size;
}
std::size_t Reservation::chunk_size() const noexcept {
  return self_->granted.chunk_size;
}
std::uint64_t Reservation::id() const noexcept {
  return self_->id();
}
int Reservation::device() const noexcept {
  return self_->granted.device;
}
Access Reservation::access() const noexcept {
  return self_->granted.access == proto::access_mode::read_only ? Access::read_only
                                                                : Access::read_write;
}
std::uint64_t Reservation::version() const noexcept {
  return self_->version;
}
ReservationState Reservation::state() const noexcept {
  return self_->state;
}

void Reservation::resize(std::size_t bytes) {
  refuse_if_read_only(*this, "resize");
  self_->session->call<proto::reservation_reply>(message_type::resize_reservation,
                                                 proto::resize_request{id(), bytes});
  self_->must_ask = true;
  self_->refresh();
}

std::size_t Reservation::refresh() {
  return self_->refresh();
}

bool Reservation::wait_version(std::uint64_t wanted, milliseconds timeout) {
  const auto give_up = clock::now() + timeout;
  const reservation_notice& notice = self_->notice();
  for (;;) {
    const std::uint32_t seen = notice_generation(notice);
    if (notice_version(notice) >= wanted) {
      self_->refresh();
      if (self_->version >= wanted) return true;
    }
    const auto now = clock::now();
    if (now >= give_up) return false;
    // Early, as at the limit, when a signal woke it and the scope's check says so
    // (sync::signals_end_waits, Python's module): the caller deals with the signal.
    if (sync::futex_wait(&notice.generation, seen, give_up - now) &&
        sync::signals_end_waits::signal_ends_wait()) {
      return false;
    }
  }
}

void Reservation::quiesce() {
  self_->quiesce();
}

ReservationDraft Reservation::begin_version(std::size_t bytes) {
  refuse_if_read_only(*this, "write a new version of");
  impl& self = *self_;
  const auto grant = self.session->call<proto::reservation_reply>(
      message_type::begin_version, proto::begin_version_request{id(), bytes});
  try {
    auto draft = std::make_unique<ReservationDraft::impl>(self, grant);
    draft->map();
    return ReservationDraft(std::move(draft));
  } catch (...) {
    self.session->call<proto::empty_payload>(message_type::abandon_version,
                                             proto::version_request{id(), grant.version});
    throw;
  }
}

void Reservation::sleep(const SleepOptions& options) {
  impl& self = *self_;
  const proto::sleep_request request = sleep_request_for(target_of(id()), options);
  self.quiesce();
  try {
    const auto asked =
        self.session->call<proto::reservation_status>(message_type::sleep_reservation, request);
    const auto ended =
        await_outcome(*self.session, request.target, asked, &self.notice(),
                      sleep_wait_limit(options), "sleep", proto::reservation_state::asleep);
    self.state = detail::to_state(ended.state);
  } catch (const Error&) {
    // Failed, it stays awake: map it here again, as the holders that kept theirs. Still under
    // way (the wait ran out or a signal ended it), a refresh lets go as every holder's does.
    self.refresh();
    throw;
  }
}

void Reservation::wake(milliseconds timeout) {
  impl& self = *self_;
  const auto target = target_of(id());
  const auto asked =
      self.session->call<proto::reservation_status>(message_type::wake_reservation, target);
  await_outcome(*self.session, target, asked, &self.notice(), timeout, "wake",
                proto::reservation_state::awake);
  self.must_ask = true;
  self.refresh();
}

ReservationStatus Reservation::status() {
  return to_status(self_->session->call<proto::reservation_status>(
      message_type::get_reservation_status, target_of(id())));
}

void Reservation::release() {
  if (!self_) return;
  const std::uint64_t reservation_id = id();
  auto session = self_->session;
  self_.reset();  // unmaps first: the chunks must not be used after the daemon lets go
  session->call<proto::empty_payload>(message_type::release_reservation,
                                      proto::reservation_release_request{reservation_id});
}

Reservation::Reservation(std::unique_ptr<impl> self) : self_(std::move(self)) {}
Reservation::Reservation(Reservation&&) noexcept = default;
Reservation& Reservation::operator=(Reservation&& other) noexcept {
  Reservation taken(std::move(other));
  std::swap(self_, taken.self_);  // what *this held is released when `taken` goes
  return *this;
}
Reservation::~Reservation() {
  try {
    release();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report; release() can
  }
}

void* ReservationDraft::data() const noexcept {
  return self_->mapped.base();
}
std::size_t ReservationDraft::size() const noexcept {
  return self_->size;
}
std::uint64_t ReservationDraft::version() const noexcept {
  return self_->version;
}

void ReservationDraft::commit() {
  impl& self = *self_;
  if (!self.open()) {
    throw Error(errc::wrong_state,
                "version " + std::to_string(self.version) +
                    (self.orphaned ? ": its reservation was released before it was committed"
                                   : " was committed or abandoned already"));
  }
  Reservation::impl& owner = *self.owner;
  // The host daemon seals the chunks, which it cannot while a writable mapping is left.
  self.mapped.clear();
  try {
    owner.session->call<proto::reservation_reply>(message_type::commit_version,
                                                  proto::version_request{owner.id(), self.version});
  } catch (...) {
    self.map();  // refused: the draft is as it was
    throw;
  }
  // The range stays reserved until the draft goes: a stale data() faults instead of reaching
  // whatever the process maps next.
  self.close();
  owner.must_ask = true;
  owner.refresh();
}

void ReservationDraft::abandon() {
  if (!self_ || !self_->open()) return;
  impl& self = *self_;
  Reservation::impl& owner = *self.owner;
  self.close();
  self.mapped.clear();
  owner.session->call<proto::empty_payload>(message_type::abandon_version,
                                            proto::version_request{owner.id(), self.version});
}

ReservationDraft::ReservationDraft(std::unique_ptr<impl> self) : self_(std::move(self)) {}
ReservationDraft::ReservationDraft(ReservationDraft&&) noexcept = default;
ReservationDraft& ReservationDraft::operator=(ReservationDraft&& other) noexcept {
  ReservationDraft taken(std::move(other));
  std::swap(self_, taken.self_);  // what *this held is abandoned when `taken` goes
  return *this;
}
ReservationDraft::~ReservationDraft() {
  try {
    abandon();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report; abandon() can
  }
}

ReservationStatus reservation_status(Client& client, std::string_view name) {
  return to_status(Reservation::session_of(client)->call<proto::reservation_status>(
      message_type::get_reservation_status, target_named(name)));
}

void sleep_reservation(Client& client, std::string_view name, const SleepOptions& options) {
  auto session = Reservation::session_of(client);
  const proto::sleep_request request = sleep_request_for(target_named(name), options);
  const auto asked =
      session->call<proto::reservation_status>(message_type::sleep_reservation, request);
  await_outcome(*session, request.target, asked, nullptr, sleep_wait_limit(options), "sleep",
                proto::reservation_state::asleep);
}

void wake_reservation(Client& client, std::string_view name, milliseconds timeout) {
  auto session = Reservation::session_of(client);
  const auto target = target_named(name);
  const auto asked =
      session->call<proto::reservation_status>(message_type::wake_reservation, target);
  await_outcome(*session, target, asked, nullptr, timeout, "wake", proto::reservation_state::awake);
}

}  // namespace gpumem
