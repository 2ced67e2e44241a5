#pragma once
/// @file
/// @brief Backing off between tries of something another process or the GPU is to free: from
/// a short spin to yielding to sleeping, for waits on another process's next few instructions
/// (which it may not be running) that can also turn out long.

#include <sched.h>

#include <chrono>
#include <thread>

#include "gpumem/shared/sync/futex.hpp"

namespace gpumem::sync {

class backoff {
 public:
  void pause() noexcept {
    using namespace std::chrono_literals;
    ++rounds_;
    if (rounds_ < 64) {
      cpu_relax();
    } else if (rounds_ < 128) {
      ::sched_yield();
    } else {
      std::this_thread::sleep_for(50us);
    }
  }

 private:
  unsigned rounds_ = 0;
};

}  // namespace gpumem::sync
