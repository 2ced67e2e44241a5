#include "supervisor.hpp"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <vector>

#include "syscall_filter.hpp"

namespace gpumem::sandbox {

namespace {

struct verdict {
  std::string what;  ///< e.g. "system call ptrace", "socket(AF_INET)"
  int error = 0;     ///< the errno systemd would return; 0: systemd kills the process
};

verdict judge(const seccomp_data& call, const unit_settings& settings,
              const std::vector<int>& allowed) {
  const int number = call.nr;
  const auto argument = [&](int index) { return static_cast<std::uint32_t>(call.args[index]); };
  if (!allowed.empty() && !std::ranges::binary_search(allowed, number)) {
    return {"system call " + syscall_name(number), settings.filtered_call_error};
  }
  if (number == SYS_socket && !settings.address_families.empty()) {
    return {"socket(address family " + std::to_string(argument(0)) + ")", EAFNOSUPPORT};
  }
  if (settings.memory_deny_write_execute) {
    if (number == SYS_mmap) return {"mmap(PROT_WRITE|PROT_EXEC)", EPERM};
    if (number == SYS_mprotect || number == SYS_pkey_mprotect) {
      return {syscall_name(number) + "(PROT_EXEC)", EPERM};
    }
  }
  return {"x32 system call " + std::to_string(number), 0};
}

std::string command_of(pid_t task) {
  std::ifstream comm("/proc/" + std::to_string(task) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "?" : name;
}

}  // namespace

void supervise(int listener, const unit_settings& settings, mode how, const std::string& command,
               const std::string& report_path) {
  seccomp_notif_sizes sizes{};
  if (::syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) return;
  std::vector<std::byte> request_buffer(
      std::max<std::size_t>(sizes.seccomp_notif, sizeof(seccomp_notif)));
  std::vector<std::byte> response_buffer(
      std::max<std::size_t>(sizes.seccomp_notif_resp, sizeof(seccomp_notif_resp)));
  const std::vector<int> allowed = allowed_syscall_numbers(settings);
  const auto started = std::chrono::steady_clock::now();
  std::map<std::string, std::pair<std::size_t, std::string>> refused;  // what -> count, task

  for (;;) {
    pollfd ready{listener, POLLIN, 0};
    if (::poll(&ready, 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if ((ready.revents & POLLIN) == 0) break;  // POLLHUP: no sandboxed task is left
    std::ranges::fill(request_buffer, std::byte{0});
    auto* request = reinterpret_cast<seccomp_notif*>(request_buffer.data());
    if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, request) != 0) continue;  // the task died
    const verdict judged = judge(request->data, settings, allowed);
    auto& seen = refused[judged.what];
    if (seen.first++ == 0) seen.second = command_of(static_cast<pid_t>(request->pid));

    std::ranges::fill(response_buffer, std::byte{0});
    auto* response = reinterpret_cast<seccomp_notif_resp*>(response_buffer.data());
    response->id = request->id;
    if (how == mode::audit) {
      response->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    } else if (judged.error != 0) {
      response->error = -judged.error;
    } else {
      // systemd's action for a filtered call: the whole process dies of SIGSYS.
      ::kill(static_cast<pid_t>(request->pid), SIGSYS);
      response->error = -ENOSYS;
    }
    ::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, response);
  }

  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started);
  std::string lines;
  const std::string prefix = "unit_sandbox " +
                             std::string(how == mode::audit ? "audit" : "enforce") + " " + command +
                             ": ";
  if (refused.empty()) {
    lines = prefix + "nothing refused in " + std::to_string(seconds.count()) + " s\n";
  }
  for (const auto& [what, seen] : refused) {
    lines += prefix + (how == mode::audit ? "would refuse " : "refused ") + what + " x" +
             std::to_string(seen.first) + " (first by thread " + seen.second + ")\n";
  }
  const int report = report_path.empty() ? STDERR_FILENO
                                         : ::open(report_path.c_str(),
                                                  O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (report < 0) return;
  // One write per report: supervisors of daemons running side by side append whole lines.
  [[maybe_unused]] const auto written = ::write(report, lines.data(), lines.size());
  if (report != STDERR_FILENO) ::close(report);
}

}  // namespace gpumem::sandbox
