#include "gpumemctl_process.hpp"

#include <chrono>

namespace gpumem::testing {

std::pair<std::string, int> run_gpumemctl(const daemon_process& daemon,
                                          const std::vector<std::string>& args,
                                          std::optional<run_as> user) {
  std::vector<std::string> argv{GPUMEM_TEST_CTL, "--socket", daemon.socket_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  child_process ctl(argv, {}, {.stderr_to_stdout = true, .user = user});
  std::string all;
  while (const auto line = ctl.read_line(std::chrono::seconds(10))) all += *line + "\n";
  const auto status = ctl.wait();
  return {all, status ? exit_code(*status) : -1};
}

}  // namespace gpumem::testing
