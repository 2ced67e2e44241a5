#include "gpumemctl_process.hpp"

#include <chrono>

namespace gpumem::testing {

namespace {
std::vector<std::string> with_socket(const daemon_process& daemon,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> all{"--socket", daemon.socket_path()};
  all.insert(all.end(), args.begin(), args.end());
  return all;
}

child_process started(const std::vector<std::string>& args, std::optional<run_as> user) {
  std::vector<std::string> argv{GPUMEM_TEST_CTL};
  argv.insert(argv.end(), args.begin(), args.end());
  return child_process(argv, {}, {.stderr_to_stdout = true, .user = user});
}
}  // namespace

std::pair<std::string, int> run_gpumemctl(const daemon_process& daemon,
                                          const std::vector<std::string>& args,
                                          std::optional<run_as> user) {
  return run_gpumemctl(with_socket(daemon, args), user);
}

std::pair<std::string, int> run_gpumemctl(const std::vector<std::string>& args,
                                          std::optional<run_as> user) {
  child_process ctl = started(args, user);
  std::string all;
  while (const auto line = ctl.read_line(std::chrono::seconds(10))) all += *line + "\n";
  const auto status = ctl.wait();
  return {all, status ? exit_code(*status) : -1};
}

child_process start_gpumemctl(const daemon_process& daemon, const std::vector<std::string>& args) {
  return started(with_socket(daemon, args), std::nullopt);
}

}  // namespace gpumem::testing
