#pragma once
/// @file
/// @brief The epoll instance behind an io_context's reactor, so that the loop can wait on its
/// own set of clients with Asio's reactor inside it (client_poller.hpp) rather than inside Asio's.
///
/// Asio does not hand out its reactor's descriptor. Every descriptor it watches is registered
/// with that epoll instance, and the kernel lists what an epoll instance watches in
/// /proc/self/fdinfo (its "tfd:" lines, with each file's inode, Linux 3.8 and later): the instance
/// that watches a descriptor just registered with the io_context is its reactor's.

#include "net/asio.hpp"

namespace gpumem::daemon {

/// @brief The descriptor of @p io's reactor (an epoll instance), which stays @p io's: do not
/// close it. It is readable when a descriptor or timer that Asio waits for is ready; not for a
/// handler posted (nor for stop()) while no thread waits in Asio's loop, which only
/// io_context::poll() or run() then finds.
/// @throws std::system_error or std::runtime_error naming the step, when /proc/self/fd cannot be
/// read, when not exactly one epoll instance there watches the probe registered with @p io (an
/// fdinfo that cannot be read lists nothing), or when that one watches no timerfd: Asio then
/// times its timers only inside run(), which this loop does not call.
int asio_reactor_descriptor(boost::asio::io_context& io);

}  // namespace gpumem::daemon
