#include "net/loop_wakeup.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace gpumem::daemon {

namespace {
unique_fd make_eventfd() {
  unique_fd made(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!made) throw std::system_error(errno, std::system_category(), "eventfd");
  return made;
}
}  // namespace

loop_wakeup::loop_wakeup(boost::asio::io_context& io, std::function<void()> on_wake)
    : counter_(make_eventfd()), watch_(io, ::dup(counter_.get())), on_wake_(std::move(on_wake)) {
  wait();
}

loop_wakeup::~loop_wakeup() {
  boost::system::error_code ignored;
  watch_.close(ignored);
}

void loop_wakeup::wake() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(counter_.get(), &one, sizeof one);
}

void loop_wakeup::wait() {
  watch_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [this](const boost::system::error_code& error) {
                      if (error) return;  // closed: the owner is going
                      std::uint64_t count = 0;
                      [[maybe_unused]] const ssize_t drained =
                          ::read(counter_.get(), &count, sizeof count);
                      on_wake_();
                      wait();
                    });
}

}  // namespace gpumem::daemon
