#include "net/adopted_processes.hpp"

#include <spdlog/spdlog.h>

#include "gpumem/shared/os/pidfd.hpp"

namespace gpumem::daemon {

adopted_processes::adopted_processes(boost::asio::io_context& io, books& state,
                                     std::function<void()> removed)
    : io_(io), books_(state), removed_(std::move(removed)) {}

void adopted_processes::watch(std::vector<std::pair<client_id, unique_fd>> processes) {
  for (auto& [client, pidfd] : processes) {
    auto each = std::make_shared<watched>(
        watched{client, boost::asio::posix::stream_descriptor(io_, pidfd.release())});
    wait(each);
  }
}

void adopted_processes::wait(const std::shared_ptr<watched>& each) {
  each->pidfd.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                         [this, each](const boost::system::error_code& error) {
                           if (error) return;
                           if (!os::process_exited(each->pidfd.native_handle())) {
                             return wait(each);
                           }
                           exited(each->client);
                         });
}

void adopted_processes::exited(client_id client) {
  const auto& clients = books_.rows.clients();
  const auto found = clients.find(client);
  // A session that resumed the client removes it itself when it ends.
  if (found == clients.end() || found->second.serving) return;
  spdlog::info("client {} (pid {}) from before the restart exited: what it held is let go", client,
               found->second.who.pid);
  books_.depart(client, true);
  books_.write_changes();
  removed_();
}

}  // namespace gpumem::daemon
