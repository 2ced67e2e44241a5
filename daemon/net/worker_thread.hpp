#pragma once
/// @file
/// @brief The loop's background (memory/background.hpp): one worker thread that runs jobs in
/// order, and Asio timers for deadlines. Results come back to the loop through a queue and a
/// loop_wakeup; after each, the books' changes are written down (state store), as after a
/// request.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "memory/background.hpp"
#include "net/asio.hpp"
#include "net/loop_wakeup.hpp"

namespace gpumem::daemon {

class worker_thread final : public background {
 public:
  /// @param after_each runs on the loop after each result and each deadline.
  worker_thread(boost::asio::io_context& io, std::function<void()> after_each);
  /// Waits for the job under way, drops the rest: the daemon is stopping.
  ~worker_thread() override;

  void run(std::function<void()> work, std::function<void(std::exception_ptr)> done) override;
  void after(std::chrono::milliseconds delay, std::function<void()> then) override;

 private:
  struct job {
    std::function<void()> work;
    std::function<void(std::exception_ptr)> done;
  };
  struct result {
    std::function<void(std::exception_ptr)> done;
    std::exception_ptr failure;
  };
  void serve();
  void deliver_results();

  boost::asio::io_context& io_;
  std::function<void()> after_each_;
  loop_wakeup results_ready_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<job> jobs_;
  std::vector<result> results_;
  bool stopping_ = false;
  std::thread thread_;  ///< last: starts once the members it uses exist
};

}  // namespace gpumem::daemon
