#include <cstddef>
#include <string>

#include "barrier_status.hpp"
#include "connection.hpp"
#include "cuda_sync.hpp"
#include "gpumem/shared/sync/host_counters.hpp"
#include "gpumem/sync.hpp"
#include "sync_object.hpp"

namespace gpumem {

using detail::cuda_sync::wait_kind;

struct Barrier::state {
  state(std::shared_ptr<detail::connection> link, std::string_view name, std::uint32_t parties,
        Mode mode)
      : object(std::move(link), name, mode, proto::sync_kind::barrier, parties,
               proto::sync_role::party),
        counters(object.cell<sync::counter_cell>()) {}

  /// The next round's token; starts over when an operator reset the barrier.
  Token next_round() {
    const std::uint32_t epoch = counters.epoch();
    if (epoch != last.epoch) last = {0, epoch};
    ++last.round;
    return last;
  }
  std::uint64_t count_address(int device, std::uint32_t party) {
    return object.signal_word(device,
                              offsetof(sync::signal_cell, counts) + party * sizeof(std::uint32_t));
  }

  detail::sync_object object;
  sync::host_counters counters;
  Token last{};
};

Barrier::Barrier() noexcept = default;
Barrier::Barrier(std::unique_ptr<state> made) : state_(std::move(made)) {}
Barrier::Barrier(Barrier&&) noexcept = default;
Barrier& Barrier::operator=(Barrier&&) noexcept = default;
Barrier::~Barrier() = default;

Barrier::Token Barrier::arrive() {
  detail::check_usable(state_.get(), "Barrier");
  state_->object.enter(sync::domain::host);
  const Token token = state_->next_round();
  state_->counters.arrive(state_->object.party(), token.round);
  return token;
}

BarrierStatus Barrier::wait(Token token) {
  detail::check_usable(state_.get(), "Barrier");
  state_->object.enter(sync::domain::host);
  if (token.epoch != state_->counters.epoch()) return BarrierStatus::broken;
  return detail::barrier_status_of(state_->counters.wait_all(token.round));
}

BarrierStatus Barrier::wait_for(Token token, std::chrono::nanoseconds timeout) {
  detail::check_usable(state_.get(), "Barrier");
  state_->object.enter(sync::domain::host);
  if (token.epoch != state_->counters.epoch()) return BarrierStatus::broken;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(timeout);
  return detail::barrier_status_of(state_->counters.wait_all(token.round, deadline));
}

BarrierStatus Barrier::arrive_and_wait() {
  return wait(arrive());
}

Barrier::Token Barrier::arrive(Stream stream) {
  detail::check_usable(state_.get(), "Barrier");
  detail::cuda_sync::stream_ops ops(stream);
  state_->object.enter(sync::domain::device, ops.device());
  const Token token = state_->next_round();
  ops.write_value(state_->count_address(ops.device(), state_->object.party()), token.round);
  return token;
}

void Barrier::wait(Token token, Stream stream) {
  detail::check_usable(state_.get(), "Barrier");
  detail::cuda_sync::stream_ops ops(stream);
  state_->object.enter(sync::domain::device, ops.device());
  for (std::uint32_t party = 0; party < state_->counters.parties(); ++party) {
    if (party == state_->object.party()) continue;
    ops.wait_value(state_->count_address(ops.device(), party), token.round, wait_kind::at_least);
  }
}

device::counters_ref Barrier::device(int device) {
  detail::check_usable(state_.get(), "Barrier");
  return state_->object.counters_on(device);
}

bool Barrier::broken() const noexcept {
  return state_ != nullptr && state_->counters.broken();
}

std::uint32_t Barrier::parties() const noexcept {
  // From the cell, not from the open: an operator's reset may have changed them since.
  return state_ ? state_->counters.parties() : 0;
}

std::uint32_t Barrier::party() const noexcept {
  return state_ ? state_->object.party() : 0;
}

Barrier Client::barrier(std::string_view name, std::uint32_t parties, const SyncOptions& options) {
  if (parties == 0 || parties > sync::kMaxParties) {
    throw Error(errc::invalid_argument,
                "barrier '" + std::string(name) + "' of " + std::to_string(parties) +
                    " parties: a barrier has 1 to " + std::to_string(sync::kMaxParties));
  }
  return Barrier(std::make_unique<Barrier::state>(connection_, name, parties, options.mode));
}

const std::string& Barrier::name() const noexcept {
  static const std::string empty;
  return state_ ? state_->object.name() : empty;
}

}  // namespace gpumem
