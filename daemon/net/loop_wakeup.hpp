#pragma once
/// @file
/// @brief How another thread wakes the loop: Asio is built without thread support here, so an
/// eventfd is the one thing a thread may touch. wake() adds to it from any thread; the loop
/// drains it and calls on_wake once for however many wakes arrived since the last call.

#include <functional>

#include "gpumem/shared/unique_fd.hpp"
#include "net/asio.hpp"

namespace gpumem::daemon {

class loop_wakeup {
 public:
  /// @brief Starts waiting on @p io; @p on_wake runs on the loop.
  loop_wakeup(boost::asio::io_context& io, std::function<void()> on_wake);
  /// No on_wake after this; the threads that call wake() must be gone.
  ~loop_wakeup();
  loop_wakeup(const loop_wakeup&) = delete;
  loop_wakeup& operator=(const loop_wakeup&) = delete;

  /// @brief From any thread, never blocks: the counter cannot overflow (one per wake), and a
  /// full one still wakes the loop.
  void wake() noexcept;

 private:
  void wait();

  unique_fd counter_;  ///< eventfd: wakers add, the loop drains
  boost::asio::posix::stream_descriptor watch_;
  std::function<void()> on_wake_;
};

}  // namespace gpumem::daemon
