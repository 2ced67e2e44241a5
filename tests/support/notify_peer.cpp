// A stand-in for gpumemd under the test supervisor (systemd_supervisor's options.binary): it
// speaks to "systemd" through daemon/systemd/ and reports what it was passed.
//
// At start it takes the passed fds and reports them in its READY=1 message as
// STATUS=passed NAME=CONTENT ... (the first bytes of each memfd). Then it runs its arguments:
//   store:NAME        stores a new memfd holding NAME under NAME (FDSTORE=1)
//   store-twice:NAME  stores one new memfd twice in one message (systemd keeps one)
//   store-again:NAME  stores again every passed fd named NAME (systemd keeps none of them twice)
//   store-from-child:NAME  a forked child stores a memfd (NotifyAccess=main ignores it)
//   remove:NAME       FDSTOREREMOVE=1 of NAME
//   barrier           waits until every earlier message is handled (exits 3 if not in 5 s)
// and waits for a signal.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <string_view>
#include <vector>

#include "systemd/activation.hpp"
#include "systemd/notify.hpp"

namespace systemd = gpumem::daemon::systemd;

namespace {
gpumem::unique_fd memfd_holding(const std::string& text) {
  gpumem::unique_fd fd(::memfd_create(text.c_str(), MFD_CLOEXEC));
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    ::_exit(2);
  }
  return fd;
}

std::string first_bytes(int fd) {
  char bytes[64];
  const ssize_t got = ::pread(fd, bytes, sizeof bytes, 0);
  return got > 0 ? std::string(bytes, static_cast<std::size_t>(got)) : "?";
}

void store(const std::string& name, const std::vector<int>& fds) {
  if (systemd::notify_with_fds("FDSTORE=1\nFDNAME=" + name, fds)) ::_exit(2);
}
}  // namespace

int main(int argc, char** argv) {
  const std::vector<systemd::passed_fd> passed = systemd::take_passed_fds();
  std::string status = "passed";
  for (const auto& each : passed) status += " " + each.name + "=" + first_bytes(each.fd.get());
  for (int index = 1; index < argc; ++index) {
    const std::string_view command = argv[index];
    const auto colon = command.find(':');
    const std::string verb(command.substr(0, colon));
    const std::string name(colon == std::string_view::npos ? "" : command.substr(colon + 1));
    if (verb == "store") {
      store(name, {memfd_holding(name).get()});
    } else if (verb == "store-twice") {
      const auto fd = memfd_holding(name);
      store(name, {fd.get(), fd.get()});
    } else if (verb == "store-again") {
      for (const auto& each : passed) {
        if (each.name == name) store(name, {each.fd.get()});
      }
    } else if (verb == "store-from-child") {
      const pid_t child = ::fork();
      if (child == 0) {
        store(name, {memfd_holding(name).get()});
        ::_exit(0);
      }
      ::waitpid(child, nullptr, 0);
    } else if (verb == "remove") {
      systemd::notify("FDSTOREREMOVE=1\nFDNAME=" + name);
    } else if (verb == "barrier") {
      if (systemd::barrier(std::chrono::seconds(5))) return 3;
    } else {
      return 4;
    }
  }
  systemd::notify("READY=1\nSTATUS=" + status);
  for (;;) ::pause();
}
