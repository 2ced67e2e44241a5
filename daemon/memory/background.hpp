#pragma once
/// @file
/// @brief What the books need of the event loop for work that must not hold it up: copies of
/// sleep and wake on a worker thread, and deadlines. Whatever comes back runs on the loop.

#include <chrono>
#include <exception>
#include <functional>

namespace gpumem::daemon {

class background {
 public:
  virtual ~background() = default;
  /// @brief Runs @p work on a worker thread (one at a time, in order), then @p done on the
  /// loop with what @p work threw (or nullptr).
  virtual void run(std::function<void()> work, std::function<void(std::exception_ptr)> done) = 0;
  /// @brief Runs @p then on the loop once @p delay has passed.
  virtual void after(std::chrono::milliseconds delay, std::function<void()> then) = 0;
};

}  // namespace gpumem::daemon
