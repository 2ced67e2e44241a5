#pragma once
// The wire's reservation_state as the public ReservationState (listings and status replies).

#include "gpumem/gpumem.hpp"
#include "gpumem/proto/messages.hpp"

namespace gpumem::detail {

inline ReservationState to_state(proto::reservation_state state) {
  switch (state) {
    case proto::reservation_state::awake:
      return ReservationState::awake;
    case proto::reservation_state::draining:
      return ReservationState::draining;
    case proto::reservation_state::asleep:
      return ReservationState::asleep;
    case proto::reservation_state::lost:
      return ReservationState::lost;
  }
  throw Error(errc::bad_message, "gpumemd sent an unknown reservation state");
}

}  // namespace gpumem::detail
