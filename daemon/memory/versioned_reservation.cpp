#include "memory/versioned_reservation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "request_error.hpp"

namespace gpumem::daemon {

using proto::errc;

versioned_reservation::versioned_reservation(std::unique_ptr<reservation> first, notice_page notice)
    : device_(first->device()),
      max_size_(first->max_size()),
      chunk_size_(first->chunk_size()),
      notice_(std::move(notice)),
      committed_(first->committed()),
      current_(std::move(first)) {
  publish();
}

versioned_reservation::versioned_reservation(std::int32_t device, std::uint64_t max_size,
                                             std::uint64_t chunk_size, saved state,
                                             notice_page notice)
    : device_(device),
      max_size_(max_size),
      chunk_size_(chunk_size),
      notice_(std::move(notice)),
      version_(state.version),
      committed_(state.committed),
      current_(std::move(state.current)),
      draft_(std::move(state.draft)),
      draft_writer_(draft_ ? state.draft_writer : 0),
      mapped_(std::move(state.mapped)),
      writers_(std::move(state.writers)),
      host_copy_(std::move(state.host_copy)),
      attempt_(state.attempt) {
  for (saved_version& each : state.older) older_.emplace(each.version, std::move(each.chunks));
  if (state.lost) {
    phase_ = phase::lost;
  } else if (state.asleep || !current_) {
    phase_ = phase::asleep;
  }
  // A sleep or wake under way when the previous daemon stopped was not finished: holders that
  // let go for it map again at their next refresh; the notice tells them.
  publish();
}

proto::reservation_state versioned_reservation::state() const noexcept {
  switch (phase_) {
    case phase::awake:
      return proto::reservation_state::awake;
    case phase::draining:
    case phase::copying_out:
      return proto::reservation_state::draining;
    case phase::asleep:
    case phase::copying_in:
      return proto::reservation_state::asleep;
    case phase::lost:
      break;
  }
  return proto::reservation_state::lost;
}

const reservation* versioned_reservation::current() const noexcept {
  return phase_ == phase::awake ? current_.get() : nullptr;
}

reservation& versioned_reservation::resizable() {
  if (version_ != 1) {
    throw request_error(errc::wrong_state,
                        fmt::format("version {} is committed and never changes: write a new "
                                    "version instead of resizing",
                                    version_));
  }
  if (phase_ != phase::awake) {
    throw request_error(errc::wrong_state, "a sleeping reservation cannot be resized");
  }
  return *current_;
}

void versioned_reservation::resized() {
  committed_ = current_->committed();
  publish();
}

void versioned_reservation::maps_current(client_id holder) {
  if (phase_ != phase::awake) return maps_nothing(holder);
  mapped_[holder] = version_;
  retire_unmapped();
}

void versioned_reservation::maps_nothing(client_id holder) {
  mapped_[holder] = 0;
  retire_unmapped();
}

void versioned_reservation::forget(client_id holder) {
  mapped_.erase(holder);
  writers_.erase(holder);
  if (draft_writer_ == holder) {
    draft_.reset();
    draft_writer_ = 0;
  }
  retire_unmapped();
}

void versioned_reservation::retire_unmapped() noexcept {
  // The worker copies from current_ only; older versions are the loop's alone.
  std::erase_if(older_, [&](const auto& entry) {
    return std::none_of(mapped_.begin(), mapped_.end(),
                        [&](const auto& holder) { return holder.second == entry.first; });
  });
}

std::vector<client_id> versioned_reservation::holders_mapping() const {
  std::vector<client_id> found;
  for (const auto& [holder, version] : mapped_) {
    if (version != 0) found.push_back(holder);
  }
  return found;
}

std::uint64_t versioned_reservation::oldest_mapped() const noexcept {
  std::uint64_t oldest = 0;
  for (const auto& [holder, version] : mapped_) {
    if (version != 0 && (oldest == 0 || version < oldest)) oldest = version;
  }
  return oldest;
}

std::uint32_t versioned_reservation::holders_on(std::uint64_t version) const noexcept {
  return static_cast<std::uint32_t>(
      std::count_if(mapped_.begin(), mapped_.end(),
                    [&](const auto& holder) { return holder.second == version; }));
}

std::uint32_t versioned_reservation::holders_behind() const noexcept {
  return static_cast<std::uint32_t>(std::count_if(
      mapped_.begin(), mapped_.end(),
      [&](const auto& holder) { return holder.second != 0 && holder.second < version_; }));
}

std::uint64_t versioned_reservation::retained_bytes() const noexcept {
  std::uint64_t bytes = draft_ ? draft_->committed() : 0;
  for (const auto& [version, chunks] : older_) bytes += chunks->committed();
  return bytes;
}

void versioned_reservation::check_draft_may_begin() const {
  if (phase_ != phase::awake) {
    throw request_error(errc::wrong_state, "a sleeping reservation takes no new version");
  }
  if (draft_) {
    throw request_error(errc::wrong_state,
                        fmt::format("version {} is being written already", version_ + 1));
  }
}

std::uint64_t versioned_reservation::begin_draft(client_id writer,
                                                 std::unique_ptr<reservation> chunks) {
  check_draft_may_begin();
  draft_ = std::move(chunks);
  draft_writer_ = writer;
  return version_ + 1;
}

const reservation* versioned_reservation::draft(client_id writer,
                                                std::uint64_t draft_version) const {
  if (!draft_ || draft_writer_ != writer || draft_version != version_ + 1) {
    throw request_error(errc::not_found,
                        fmt::format("this client writes no version {}", draft_version));
  }
  return draft_.get();
}

void versioned_reservation::commit_draft(client_id writer, std::uint64_t draft_version) {
  draft(writer, draft_version);
  draft_->seal();
  if (holders_on(version_) != 0) older_.emplace(version_, std::move(current_));
  current_ = std::move(draft_);
  draft_writer_ = 0;
  version_ = draft_version;
  committed_ = current_->committed();
  publish();
}

void versioned_reservation::abandon_draft(client_id writer, std::uint64_t draft_version) {
  draft(writer, draft_version);
  draft_.reset();
  draft_writer_ = 0;
}

const char* versioned_reservation::where_it_stands() const noexcept {
  switch (phase_) {
    case phase::awake:
      return "it is awake";
    case phase::draining:
      return "a sleep is under way (its holders letting go)";
    case phase::copying_out:
      return "a sleep is under way (its bytes being copied out)";
    case phase::asleep:
      return "it is asleep";
    case phase::copying_in:
      return "a wake is under way";
    case phase::lost:
      break;
  }
  return "it is lost";
}

void versioned_reservation::check_may_sleep(std::string_view named) const {
  if (phase_ != phase::awake) {
    throw request_error(errc::wrong_state,
                        fmt::format("{} cannot go to sleep: {}", named, where_it_stands()));
  }
  if (draft_) {
    throw request_error(errc::wrong_state, fmt::format("{} cannot go to sleep: version {} is being "
                                                       "written: commit or abandon it first",
                                                       named, version_ + 1));
  }
}

void versioned_reservation::begin_sleep(std::string_view named, bool discard) {
  check_may_sleep(named);
  ++attempt_;
  discard_ = discard;
  failure_ = errc::ok;
  failure_reason_.clear();
  phase_ = phase::draining;
  publish();
}

bool versioned_reservation::ready_to_copy_out() const noexcept {
  return phase_ == phase::draining && holders_mapping().empty();
}

const reservation* versioned_reservation::begin_copy_out() {
  phase_ = phase::copying_out;
  return discard_ ? nullptr : current_.get();
}

void versioned_reservation::finish_sleep(std::optional<sleep_copy> copy) {
  host_copy_ = std::move(copy);
  current_.reset();
  older_.clear();
  phase_ = phase::asleep;
  publish();
}

void versioned_reservation::check_may_wake(std::string_view named) const {
  if (phase_ != phase::asleep) {
    throw request_error(errc::wrong_state,
                        fmt::format("{} cannot wake: {}", named, where_it_stands()));
  }
}

reservation& versioned_reservation::begin_copy_in(std::unique_ptr<reservation> fresh) {
  failure_ = errc::ok;
  failure_reason_.clear();
  waking_ = std::move(fresh);
  phase_ = phase::copying_in;
  return *waking_;
}

std::optional<sleep_copy> versioned_reservation::finish_wake() {
  current_ = std::move(waking_);
  phase_ = phase::awake;
  publish();
  return std::exchange(host_copy_, {});
}

void versioned_reservation::fail(errc code, std::string reason) {
  failure_ = code;
  failure_reason_ = std::move(reason);
  if (phase_ == phase::copying_in) {
    waking_.reset();
    phase_ = phase::asleep;
  } else {
    phase_ = phase::awake;
  }
  publish();
}

std::optional<sleep_copy> versioned_reservation::lose() {
  std::optional<sleep_copy> bytes = std::exchange(host_copy_, {});
  current_.reset();
  older_.clear();
  phase_ = phase::lost;
  publish();
  return bytes;
}

proto::reservation_status versioned_reservation::status(object_id id) const {
  proto::reservation_status reply{};
  reply.reservation_id = id;
  reply.version = version_;
  reply.committed = committed_;
  reply.host_bytes = host_copy_ ? host_copy_->bytes : 0;
  reply.state = state();
  reply.generation = notice_.generation();
  reply.busy =
      phase_ == phase::draining || phase_ == phase::copying_out || phase_ == phase::copying_in;
  reply.error = static_cast<std::uint32_t>(failure_);
  const std::size_t length = std::min(failure_reason_.size(), proto::kReasonCapacity - 1);
  std::memcpy(reply.reason, failure_reason_.data(), length);
  return reply;
}

void versioned_reservation::publish() noexcept {
  notice_.publish(state(), version_);
}

}  // namespace gpumem::daemon
