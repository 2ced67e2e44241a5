#include "net/worker_thread.hpp"

#include <memory>

namespace gpumem::daemon {

worker_thread::worker_thread(boost::asio::io_context& io, std::function<void()> after_each)
    : io_(io),
      after_each_(std::move(after_each)),
      results_ready_(io, [this] { deliver_results(); }),
      thread_([this] { serve(); }) {}

worker_thread::~worker_thread() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void worker_thread::run(std::function<void()> work, std::function<void(std::exception_ptr)> done) {
  {
    const std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(work), std::move(done)});
  }
  wake_.notify_one();
}

void worker_thread::after(std::chrono::milliseconds delay, std::function<void()> then) {
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, delay);
  timer->async_wait([this, timer, then = std::move(then)](const boost::system::error_code& error) {
    if (error) return;  // cancelled: the loop is stopping
    then();
    after_each_();
  });
}

void worker_thread::serve() {
  for (;;) {
    job next;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      next = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::exception_ptr failure;
    try {
      next.work();
    } catch (...) {
      failure = std::current_exception();
    }
    {
      const std::lock_guard lock(mutex_);
      results_.push_back({std::move(next.done), failure});
    }
    results_ready_.wake();
  }
}

void worker_thread::deliver_results() {
  std::vector<result> ready;
  {
    const std::lock_guard lock(mutex_);
    ready.swap(results_);
  }
  for (result& each : ready) each.done(each.failure);
  if (!ready.empty()) after_each_();
}

}  // namespace gpumem::daemon
