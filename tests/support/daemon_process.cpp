#include "daemon_process.hpp"

#include <stdlib.h>

#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "temporary_folder.hpp"

namespace gpumem::testing {

namespace {

std::vector<std::string> daemon_argv(const std::string& socket,
                                     const std::vector<std::string>& extra, bool readable_log) {
  const std::string asked = std::getenv("GPUMEM_TEST_LOG") ? std::getenv("GPUMEM_TEST_LOG") : "";
  // A log the test reads needs info's lines; a more verbose level asked for has them too.
  const bool more_than_info = asked == "debug" || asked == "trace";
  const std::string level = readable_log && !more_than_info ? "info"
                            : asked.empty()                 ? "warn"
                                                            : asked;
  std::vector<std::string> argv = daemon_command();
  argv.insert(argv.end(), {"--socket", socket, "--log-level", level});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}
}  // namespace

std::string daemon_binary() {
  return GPUMEM_TEST_DAEMON;
}

std::vector<std::string> daemon_command() {
  std::vector<std::string> command;
  if (const char* wrapper = std::getenv("GPUMEM_TEST_DAEMON_WRAPPER")) {
    std::istringstream words(wrapper);
    for (std::string word; words >> word;) command.push_back(word);
  }
  command.push_back(daemon_binary());
  return command;
}
std::string peer_binary() {
  return GPUMEM_TEST_PEER;
}

daemon_process::daemon_process(const std::vector<std::string>& extra_args, bool readable_log)
    : folder_(make_temporary_folder("test")),
      socket_path_(folder_ + "/gpumemd.sock"),
      process_(daemon_argv(socket_path_, extra_args, readable_log), {},
               {.stderr_to_stdout = readable_log, .user = std::nullopt}) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    try {
      connect("probe").ping();
      return;
    } catch (const gpumem::Error&) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("gpumemd did not start on " + socket_path_);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

daemon_process::~daemon_process() {
  stop();
  std::error_code ignored;
  std::filesystem::remove_all(folder_, ignored);
}

gpumem::Client daemon_process::connect(const std::string& label) const {
  return gpumem::Client::connect({.socket_path = socket_path_, .label = label});
}

int daemon_process::stop(int signal) {
  if (process_.pid() <= 0) return -1;
  process_.signal(signal);
  const auto status = process_.wait(std::chrono::seconds(20));
  return status ? exit_code(*status) : -1;
}

std::size_t daemon_process::open_fd_count() const {
  return testing::open_fd_count(pid());
}

bool daemon_process::wait_for_bytes_in_use(std::uint64_t expected,
                                           std::chrono::milliseconds within) const {
  auto client = connect("watcher");
  const auto deadline = std::chrono::steady_clock::now() + within;
  for (;;) {
    if (client.stats().pools.at(0).bytes_in_use == expected) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace gpumem::testing
