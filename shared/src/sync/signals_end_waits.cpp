#include "gpumem/shared/sync/signals_end_waits.hpp"

namespace gpumem::sync {

namespace {

thread_local bool signals_end_waits_here = false;

}  // namespace

signals_end_waits::signals_end_waits() noexcept : outer_(signals_end_waits_here) {
  signals_end_waits_here = true;
}

signals_end_waits::~signals_end_waits() {
  signals_end_waits_here = outer_;
}

bool signals_end_waits::here() noexcept {
  return signals_end_waits_here;
}

}  // namespace gpumem::sync
