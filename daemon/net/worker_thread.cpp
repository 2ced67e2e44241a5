#include "net/worker_thread.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <system_error>

namespace gpumem::daemon {

namespace {
unique_fd make_eventfd() {
  unique_fd made(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!made) throw std::system_error(errno, std::system_category(), "eventfd");
  return made;
}
}  // namespace

worker_thread::worker_thread(boost::asio::io_context& io, std::function<void()> after_each)
    : io_(io),
      after_each_(std::move(after_each)),
      results_ready_(make_eventfd()),
      results_watch_(io, ::dup(results_ready_.get())),
      thread_([this] { serve(); }) {
  wait_for_results();
}

worker_thread::~worker_thread() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  boost::system::error_code ignored;
  results_watch_.close(ignored);
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
    const std::uint64_t one = 1;
    // The counter cannot overflow (one per job), and a full one still wakes the loop.
    [[maybe_unused]] const ssize_t written = ::write(results_ready_.get(), &one, sizeof one);
  }
}

void worker_thread::wait_for_results() {
  results_watch_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                            [this](const boost::system::error_code& error) {
                              if (error) return;  // closed: the worker is going
                              deliver_results();
                              wait_for_results();
                            });
}

void worker_thread::deliver_results() {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t drained = ::read(results_ready_.get(), &count, sizeof count);
  std::vector<result> ready;
  {
    const std::lock_guard lock(mutex_);
    ready.swap(results_);
  }
  for (result& each : ready) each.done(each.failure);
  if (!ready.empty()) after_each_();
}

}  // namespace gpumem::daemon
