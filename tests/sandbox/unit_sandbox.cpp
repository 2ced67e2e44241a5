// unit_sandbox: runs a program under the sandbox a systemd unit describes, where systemd is not
// PID 1 (this development machine, the GPU machine, a container), so that what
// deploy/gpumemd.service forbids is tested against the real daemon and the real CUDA driver.
//
//   unit_sandbox --unit UNIT [--syscalls LIST] [--audit] [--report FILE] -- PROGRAM ARGS...
//
// The program keeps this process's pid (tests signal it, systemd's LISTEN_PID names it): the
// sandbox is set up here, a supervisor is forked to answer seccomp notifications, and this
// process execs the program. In order: a network namespace with only loopback
// (PrivateNetwork=), a private /proc mount (ProtectProc=, ProcSubset=), no new privileges, no
// capability, then the seccomp program (syscall_filter.hpp). LIST is SystemCallFilter='s
// expansion, written by scripts/unit-syscalls. --audit lets every call run and reports what the
// unit would refuse; without it, refusals happen as under systemd. The report (FILE, appended
// to, else the program's stderr) gets one line per kind of refusal, or one saying there was none.
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gpumem/shared/fd_passing.hpp"
#include "supervisor.hpp"
#include "syscall_filter.hpp"
#include "unit_settings.hpp"

using namespace gpumem::sandbox;

namespace {

struct arguments {
  std::string unit;
  std::string syscalls;
  std::string report;  ///< empty: the supervisor's stderr, which is the program's
  mode how = mode::enforce;
  std::vector<char*> program;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "unit_sandbox: %s\n", what.c_str());
  std::exit(2);
}

void check(bool ok, const std::string& what) {
  if (!ok) fail(what + ": " + std::strerror(errno));
}

arguments parse(int argc, char** argv) {
  arguments parsed;
  int index = 1;
  for (; index < argc; ++index) {
    const std::string_view flag = argv[index];
    auto value = [&]() -> std::string {
      if (index + 1 >= argc) fail(std::string(flag) + " needs a value");
      return argv[++index];
    };
    if (flag == "--") {
      ++index;
      break;
    }
    if (flag == "--unit") {
      parsed.unit = value();
    } else if (flag == "--syscalls") {
      parsed.syscalls = value();
    } else if (flag == "--report") {
      parsed.report = value();
    } else if (flag == "--audit") {
      parsed.how = mode::audit;
    } else {
      fail("unknown option " + std::string(flag));
    }
  }
  if (parsed.unit.empty() || index >= argc) {
    fail(
        "usage: unit_sandbox --unit UNIT [--syscalls LIST] [--audit] [--report FILE] -- PROGRAM "
        "...");
  }
  parsed.program.assign(argv + index, argv + argc);
  parsed.program.push_back(nullptr);
  return parsed;
}

/// PrivateNetwork=: a namespace of its own whose loopback is up, as systemd leaves it.
void enter_private_network() {
  check(::unshare(CLONE_NEWNET) == 0, "unshare(CLONE_NEWNET) for PrivateNetwork=");
  const int probe = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  check(probe >= 0, "a socket to bring loopback up");
  ifreq request{};
  std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  check(::ioctl(probe, SIOCGIFFLAGS, &request) == 0, "reading loopback's flags");
  request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
  check(::ioctl(probe, SIOCSIFFLAGS, &request) == 0, "bringing loopback up");
  ::close(probe);
}

/// ProtectProc= and ProcSubset=: a /proc of its own with those mount options.
void mount_private_proc(const std::string& options) {
  check(::unshare(CLONE_NEWNS) == 0, "unshare(CLONE_NEWNS) for ProtectProc=");
  check(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0,
        "making the mount namespace private");
  check(::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) == 0,
        "mounting /proc with " + options);
}

/// CapabilityBoundingSet= (empty): nothing in the bounding, ambient, effective, permitted or
/// inheritable sets, so not even a root-owned program regains one across exec.
void drop_all_capabilities() {
  for (int capability = 0; capability <= CAP_LAST_CAP; ++capability) {
    if (::prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 && errno != EINVAL) {
      check(false, "dropping capability " + std::to_string(capability));
    }
  }
  check(::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0, "clearing ambient caps");
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3]{};
  check(::syscall(SYS_capset, &header, none) == 0, "capset to nothing");
}

void send_fd(int socket, int fd) {
  const std::byte marker{0};
  std::error_code error;
  const int fds[] = {fd};
  const bool sent = gpumem::send_with_fds(socket, std::span(&marker, 1), fds, error) == 1 && !error;
  errno = error.value();
  check(sent, "handing the listener to the supervisor");
}

int receive_fd(int socket) {
  std::byte marker{};
  std::vector<gpumem::unique_fd> fds;
  std::error_code error;
  if (gpumem::recv_with_fds(socket, std::span(&marker, 1), fds, error) != 1 || fds.size() != 1)
    return -1;
  return fds.front().release();
}

/// The supervisor keeps nothing of the program's (its sockets, passed fds, the pipes a test
/// reads to their end) but its end of @p channel, and stderr where the report goes there.
[[noreturn]] void run_supervisor(int channel, const unit_settings& settings,
                                 const arguments& args) {
  const int null = ::open("/dev/null", O_RDWR);
  if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(null, 1) < 0 ||
      (!args.report.empty() && ::dup2(null, 2) < 0) || ::dup2(channel, 3) < 0) {
    ::_exit(1);
  }
  ::close_range(4, ~0U, 0);
  const int listener = receive_fd(3);
  if (listener < 0) ::_exit(0);  // the program failed before its filter was in place
  ::close(3);
  supervise(listener, settings, args.how, args.program[0], args.report);
  ::_exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const arguments args = parse(argc, argv);
  unit_settings settings;
  try {
    settings = read_unit_settings(args.unit, args.syscalls);
  } catch (const std::exception& error) {
    fail(error.what());
  }
  if (!settings.allowed_syscalls.empty()) {
    // This process hands the listener over once the filter is in force (execve is always
    // allowed).
    for (const char* needed : {"sendmsg", "close"}) {
      if (!settings.allowed_syscalls.contains(needed)) {
        fail(args.unit + ": SystemCallFilter= refuses " + needed + ", which unit_sandbox needs");
      }
    }
  }
  if (settings.private_network) enter_private_network();
  if (!settings.proc_mount_options.empty()) mount_private_proc(settings.proc_mount_options);

  const bool filtering = needs_filter(settings);
  int channel[2] = {-1, -1};
  if (filtering) {
    check(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel) == 0, "socketpair");
    const pid_t supervisor = ::fork();
    check(supervisor >= 0, "fork");
    if (supervisor == 0) run_supervisor(channel[1], settings, args);
    ::close(channel[1]);
  }
  if (settings.no_new_privileges || filtering) {
    check(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS");
  }
  if (settings.drop_all_capabilities) drop_all_capabilities();
  if (filtering) {
    std::vector<sock_filter> code = build_filter(settings);
    sock_fprog program{static_cast<unsigned short>(code.size()), code.data()};
    const long listener =
        ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
    check(listener >= 0, "installing the seccomp program");
    send_fd(channel[0], static_cast<int>(listener));
    ::close(static_cast<int>(listener));
    ::close(channel[0]);
  }
  ::execvp(args.program[0], args.program.data());
  std::fprintf(stderr, "unit_sandbox: exec %s: %s\n", args.program[0], std::strerror(errno));
  return 127;
}
