#pragma once
// A gpumemd of the benchmark's own, on a socket in a fresh temporary folder: started before
// any party forks, stopped (SIGTERM) and cleaned up when it goes out of scope.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

class bench_daemon {
 public:
  /// @param log_level gpumemd's --log-level: its log goes to this process's stderr.
  /// @param config_yaml empty: the built-in configuration; else the text of gpumemd's --config.
  explicit bench_daemon(const std::string& binary, const char* prefix,
                        const std::string& log_level = "warn",
                        const std::string& config_yaml = {}) {
    std::string pattern = std::string("/tmp/") + prefix + "-XXXXXX";
    folder_ = ::mkdtemp(pattern.data());
    socket_ = folder_ + "/gpumemd.sock";
    const std::string config = folder_ + "/gpumemd.yaml";
    if (!config_yaml.empty()) std::ofstream(config) << config_yaml;
    pid_ = ::fork();
    if (pid_ == 0) {
      if (config_yaml.empty()) {
        ::execl(binary.c_str(), binary.c_str(), "--socket", socket_.c_str(), "--log-level",
                log_level.c_str(), nullptr);
      } else {
        ::execl(binary.c_str(), binary.c_str(), "--socket", socket_.c_str(), "--log-level",
                log_level.c_str(), "--config", config.c_str(), nullptr);
      }
      ::_exit(127);
    }
    while (!std::filesystem::exists(socket_)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~bench_daemon() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
    std::filesystem::remove_all(folder_);
  }
  bench_daemon(const bench_daemon&) = delete;
  bench_daemon& operator=(const bench_daemon&) = delete;

  const std::string& socket() const noexcept { return socket_; }
  pid_t pid() const noexcept { return pid_; }

 private:
  std::string folder_;
  std::string socket_;
  pid_t pid_ = -1;
};
