// The daemon's loop (daemon/net/client_poller.hpp) and how it finds Asio's reactor
// (daemon/net/asio_reactor.hpp), without sessions: what runs Asio's work when the loop's thread
// waits on its own epoll set.
#include "net/client_poller.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "gpumem/shared/unique_fd.hpp"
#include "net/asio_reactor.hpp"

namespace {

using gpumem::unique_fd;
using namespace std::chrono_literals;

unique_fd epoll_instance() {
  unique_fd made(::epoll_create1(EPOLL_CLOEXEC));
  EXPECT_TRUE(made) << "epoll_create1";
  return made;
}

TEST(AsioReactor, IsTheEpollInstanceThatWatchesItsProbeNotOneListingTheSameNumber) {
  // Asio makes its reactor (epoll, eventfd, timerfd) before the decoy, so that none of them takes
  // the number the decoy lists.
  boost::asio::io_context io(1);
  { const boost::asio::posix::stream_descriptor made_the_reactor(io, ::dup(0)); }
  // A decoy, as an epoll instance inherited from whoever started the daemon would be: it lists a
  // descriptor number whose file is another one by the time the probe gets that number.
  const unique_fd decoy = epoll_instance();
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  epoll_event interest{};
  interest.events = EPOLLIN;
  ASSERT_EQ(::epoll_ctl(decoy.get(), EPOLL_CTL_ADD, ends[0], &interest), 0);
  // The watched file lives on under another number; its old number is free again, and the next
  // descriptor made (the probe's pipe) gets the lowest free one: that number.
  const unique_fd kept(::dup(ends[0]));
  const unique_fd write_end(ends[1]);
  const int listed = ends[0];
  ::close(listed);
  {
    const unique_fd next(::dup(0));
    ASSERT_EQ(next.get(), listed) << "the probe would not get the number the decoy lists";
  }

  const int reactor = gpumem::daemon::asio_reactor_descriptor(io);
  EXPECT_NE(reactor, decoy.get());
  EXPECT_GE(reactor, 0);
  // The reactor found is the one that tells of Asio's readiness: a timer's expiry shows in it.
  const unique_fd watcher = epoll_instance();
  interest.data.u64 = 7;
  ASSERT_EQ(::epoll_ctl(watcher.get(), EPOLL_CTL_ADD, reactor, &interest), 0);
  boost::asio::steady_timer soon(io, 1ms);
  soon.async_wait([](const boost::system::error_code&) {});
  epoll_event event{};
  EXPECT_EQ(::epoll_wait(watcher.get(), &event, 1, 5000), 1) << "the reactor never became ready";
}

TEST(ClientPoller, RunsWhatWasPostedBeforeItStartedAndTimersWhileItWaitsUntilStopped) {
  boost::asio::io_context io(1);
  gpumem::daemon::client_poller poller(io);
  bool posted_ran = false;
  bool timer_ran = false;
  boost::asio::post(io, [&] { posted_ran = true; });
  // Taken before the timer is armed: the timer's 50 ms count from its construction, so a clock
  // read after it could see the expiry a little under 50 ms later (CI saw 49.89 ms).
  const auto started = std::chrono::steady_clock::now();
  boost::asio::steady_timer later(io, 50ms);
  later.async_wait([&](const boost::system::error_code& error) {
    timer_ran = !error;
    io.stop();
  });
  poller.run();
  EXPECT_TRUE(posted_ran);
  EXPECT_TRUE(timer_ran);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 50ms);
}

TEST(ClientPoller, KeepsWaitingForClientsWhenAsioHasNothingLeftToDo) {
  // Clients are no work of Asio's, and Asio stops an io_context whose last work is done: a loop
  // that ended then would leave its clients unserved. In a child, so that a loop that waits for
  // ever can be killed.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    boost::asio::io_context io(1);
    gpumem::daemon::client_poller poller(io);
    boost::asio::steady_timer only_work(io, 1ms);
    only_work.async_wait([](const boost::system::error_code&) {});
    poller.run();
    ::_exit(3);  // the loop ended
  }
  std::this_thread::sleep_for(300ms);
  int status = 0;
  const pid_t ended = ::waitpid(child, &status, WNOHANG);
  if (ended == 0) ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  EXPECT_EQ(ended, 0) << "the loop ended once Asio had nothing left to do (status " << status
                      << ")";
}

}  // namespace
