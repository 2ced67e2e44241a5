#pragma once
// Waiting in a test for what another process does (a daemon reclaiming, a driver freeing):
// looks again every few milliseconds until it holds or the time is up.

#include <chrono>
#include <thread>

namespace gpumem::testing {

/// @return whether @p holds() came true within @p within, asked every @p every.
template <typename Condition>
bool eventually(const Condition& holds,
                std::chrono::milliseconds within = std::chrono::milliseconds(5000),
                std::chrono::milliseconds every = std::chrono::milliseconds(2)) {
  const auto give_up = std::chrono::steady_clock::now() + within;
  while (!holds()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

}  // namespace gpumem::testing
