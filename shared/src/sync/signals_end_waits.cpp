#include "gpumem/shared/sync/signals_end_waits.hpp"

namespace gpumem::sync {

namespace {

thread_local signals_end_waits::check check_here = nullptr;

}  // namespace

signals_end_waits::signals_end_waits(check handler_raised) noexcept : outer_(check_here) {
  check_here = handler_raised;
}

signals_end_waits::~signals_end_waits() {
  check_here = outer_;
}

bool signals_end_waits::signal_ends_wait() noexcept {
  return check_here != nullptr && check_here();
}

}  // namespace gpumem::sync
