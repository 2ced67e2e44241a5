#include "systemd_supervisor.hpp"

#include <fcntl.h>
#include <linux/kcmp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "daemon_process.hpp"
#include "notification.hpp"
#include "temporary_folder.hpp"
#include "unix_address.hpp"

extern char** environ;

namespace gpumem::testing {

namespace {
/// Sent by the supervisor itself, from the test's pid, to learn when the queue before it is
/// handled; no daemon can send it (NotifyAccess=main).
constexpr std::string_view kFlushMarker = "X_TEST_SUPERVISOR_FLUSH=";
constexpr auto kReadyTimeout = std::chrono::seconds(10);
constexpr auto kStopTimeout = std::chrono::seconds(20);
/// Room in "LISTEN_PID=" and "WATCHDOG_PID=" entries for the child to write its pid into.
constexpr std::size_t kPidDigits = 24;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("systemd_supervisor: " + what + ": " + std::strerror(errno));
}

unique_fd bound_socket(int type, const std::string& path) {
  unique_fd socket(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!socket) fail("socket");
  const sockaddr_un address = unix_address(path);
  if (::bind(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    fail("bind " + path);
  }
  return socket;
}

/// Whether @p a and @p b are the same open file, as systemd's same_fd() decides: kcmp where the
/// kernel has it, else the inode and the file status flags.
bool same_file(int a, int b) {
  const pid_t self = ::getpid();
  const long compared = ::syscall(SYS_kcmp, self, self, KCMP_FILE, a, b);
  if (compared >= 0) return compared == 0;
  struct stat first {};
  struct stat second {};
  if (::fstat(a, &first) != 0 || ::fstat(b, &second) != 0) return false;
  return first.st_dev == second.st_dev && first.st_ino == second.st_ino &&
         ::fcntl(a, F_GETFL) == ::fcntl(b, F_GETFL);
}

/// fdname_is_valid() of systemd: printable ASCII without ':', at most 255 characters.
bool valid_fd_name(std::string_view name) {
  if (name.empty() || name.size() > 255) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return c >= ' ' && c <= '~' && c != ':'; });
}

bool ended(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

bool environment_key_is_ours(std::string_view entry) {
  for (const std::string_view key : {"NOTIFY_SOCKET=", "LISTEN_PID=", "LISTEN_FDS=",
                                     "LISTEN_FDNAMES=", "WATCHDOG_USEC=", "WATCHDOG_PID="}) {
    if (entry.starts_with(key)) return true;
  }
  return false;
}

/// What the child needs between fork and exec, all allocated before the fork: after it only
/// async-signal-safe calls are allowed (the test process has threads).
struct exec_plan {
  std::vector<int> passed;  // to become fds 3, 4, ...
  std::vector<int> moved;   // scratch: the passed fds above the range they go to
  int log = -1;
  char* listen_pid_digits = nullptr;
  char* watchdog_pid_digits = nullptr;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

void write_pid(char* digits, pid_t pid) {
  char reversed[kPidDigits];
  std::size_t count = 0;
  auto value = static_cast<unsigned long>(pid);
  do {
    reversed[count++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  for (std::size_t i = 0; i < count; ++i) digits[i] = reversed[count - 1 - i];
  digits[count] = '\0';
}

[[noreturn]] void exec_child(exec_plan& plan) {
  ::dup2(plan.log, STDOUT_FILENO);
  ::dup2(plan.log, STDERR_FILENO);
  const int first = 3;
  const int after = first + static_cast<int>(plan.passed.size());
  // Out of the way first, so that placing one cannot close another still to be placed.
  for (std::size_t i = 0; i < plan.passed.size(); ++i) {
    plan.moved[i] = ::fcntl(plan.passed[i], F_DUPFD_CLOEXEC, after);
    if (plan.moved[i] < 0) ::_exit(126);
  }
  for (std::size_t i = 0; i < plan.moved.size(); ++i) {
    if (::dup2(plan.moved[i], first + static_cast<int>(i)) < 0) ::_exit(126);  // not CLOEXEC
  }
  if (::close_range(static_cast<unsigned>(after), UINT_MAX, 0) != 0) {
    for (int fd = after; fd < after + 65536; ++fd) ::close(fd);
  }
  if (plan.listen_pid_digits != nullptr) write_pid(plan.listen_pid_digits, ::getpid());
  if (plan.watchdog_pid_digits != nullptr) write_pid(plan.watchdog_pid_digits, ::getpid());
  ::execve(plan.argv[0], plan.argv.data(), plan.envp.data());
  ::_exit(127);
}
}  // namespace

systemd_supervisor::systemd_supervisor(options settings)
    : options_(std::move(settings)),
      folder_(make_temporary_folder("systemd")),
      socket_path_(folder_ + "/gpumemd.sock"),
      notify_path_(folder_ + "/notify.sock") {
  // Each stored fd is held here and, for a moment in each start, twice in the child: room for
  // a full store.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  if (options_.socket_activation) {
    listener_ = bound_socket(SOCK_STREAM, socket_path_);
    if (::listen(listener_.get(), SOMAXCONN) != 0) fail("listen");
  }
  notify_socket_ = bound_socket(SOCK_DGRAM, notify_path_);
  const int on = 1;
  if (::setsockopt(notify_socket_.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0) {
    fail("SO_PASSCRED");
  }
  log_.reset(
      ::open((folder_ + "/daemon.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log_) fail("open the daemon's log");
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) fail("pipe2");
  wake_read_.reset(wake[0]);
  wake_write_.reset(wake[1]);
  receiver_ = std::thread([this] { receive_loop(); });
}

systemd_supervisor::~systemd_supervisor() {
  {
    std::lock_guard lock(mutex_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  // A full pipe already wakes the receiver: a failed write changes nothing.
  if (::write(wake_write_.get(), "x", 1) < 0) ::perror("waking the notification receiver");
  receiver_.join();
  std::error_code ignored;
  std::filesystem::remove_all(folder_, ignored);
}

void systemd_supervisor::set_args(std::vector<std::string> args) {
  std::lock_guard lock(mutex_);
  options_.args = std::move(args);
}

void systemd_supervisor::start() {
  if (!collect_ended()) throw std::logic_error("systemd_supervisor::start: the daemon runs");
  std::unique_lock lock(mutex_);
  std::vector<std::string> argv_storage;
  if (options_.binary.empty()) {
    const char* level = std::getenv("GPUMEM_TEST_LOG");
    argv_storage = daemon_command();
    argv_storage.insert(argv_storage.end(), {"--socket", socket_path_, "--log-level",
                                             level != nullptr ? level : "warn"});
  } else {
    argv_storage = {options_.binary};
  }
  argv_storage.insert(argv_storage.end(), options_.args.begin(), options_.args.end());

  exec_plan plan;
  plan.log = log_.get();
  std::string names;
  if (listener_) {
    plan.passed.push_back(listener_.get());
    names = "listen";
  }
  for (const auto& each : store_) {
    plan.passed.push_back(each.fd.get());
    names += (names.empty() ? "" : ":") + each.name;
  }
  plan.moved.resize(plan.passed.size());

  std::vector<std::string> env_storage;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!environment_key_is_ours(*entry)) env_storage.emplace_back(*entry);
  }
  env_storage.insert(env_storage.end(), options_.env.begin(), options_.env.end());
  env_storage.push_back("NOTIFY_SOCKET=" + notify_path_);
  // Filled in by the child with its own pid; reserved here so no pointer moves.
  env_storage.reserve(env_storage.size() + 5);
  std::string* listen_pid = nullptr;
  std::string* watchdog_pid = nullptr;
  if (!plan.passed.empty()) {
    env_storage.push_back("LISTEN_FDS=" + std::to_string(plan.passed.size()));
    env_storage.push_back("LISTEN_FDNAMES=" + names);
    listen_pid = &env_storage.emplace_back("LISTEN_PID=" + std::string(kPidDigits, '\0'));
  }
  if (options_.watchdog.count() > 0) {
    env_storage.push_back("WATCHDOG_USEC=" + std::to_string(options_.watchdog.count()));
    watchdog_pid = &env_storage.emplace_back("WATCHDOG_PID=" + std::string(kPidDigits, '\0'));
  }
  if (listen_pid != nullptr) plan.listen_pid_digits = listen_pid->data() + strlen("LISTEN_PID=");
  if (watchdog_pid != nullptr) {
    plan.watchdog_pid_digits = watchdog_pid->data() + strlen("WATCHDOG_PID=");
  }
  for (auto& each : argv_storage) plan.argv.push_back(each.data());
  plan.argv.push_back(nullptr);
  for (auto& each : env_storage) plan.envp.push_back(each.data());
  plan.envp.push_back(nullptr);

  ready_ = false;
  // Under the lock: the receiving thread must know the new pid before it can hear from it.
  const pid_t child = ::fork();
  if (child < 0) fail("fork");
  if (child == 0) exec_child(plan);
  pid_ = child;
  lock.unlock();
  wait_until_ready();
}

void systemd_supervisor::wait_until_ready() {
  const auto deadline = std::chrono::steady_clock::now() + kReadyTimeout;
  for (;;) {
    pid_t child = -1;
    {
      std::unique_lock lock(mutex_);
      if (changed_.wait_for(lock, std::chrono::milliseconds(20), [this] { return ready_; })) {
        return;
      }
      child = pid_;
    }
    if (ended(child)) {
      int status = 0;
      ::waitpid(child, &status, 0);
      flush();
      std::lock_guard lock(mutex_);
      pid_ = -1;
      throw std::runtime_error("systemd_supervisor: the daemon exited (wait status " +
                               std::to_string(status) + ") before READY=1; its log ends:\n" +
                               log_tail());
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error(
          "systemd_supervisor: no READY=1 within 10 s; the daemon's log "
          "ends:\n" +
          log_tail());
    }
  }
}

int systemd_supervisor::kill(int signal) {
  pid_t child = -1;
  {
    std::lock_guard lock(mutex_);
    child = pid_;
  }
  if (child <= 0) throw std::logic_error("systemd_supervisor::kill: no daemon runs");
  ::kill(child, signal);
  const auto deadline = std::chrono::steady_clock::now() + kStopTimeout;
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Its last messages (an FDSTORE=1 just before it died) still count, as they do for systemd.
  flush();
  std::lock_guard lock(mutex_);
  pid_ = -1;
  return status;
}

void systemd_supervisor::restart(int signal) {
  if (running()) kill(signal);
  start();
}

bool systemd_supervisor::collect_ended() {
  pid_t child = -1;
  {
    std::lock_guard lock(mutex_);
    child = pid_;
  }
  if (child <= 0) return true;
  if (!ended(child)) return false;
  ::waitpid(child, nullptr, 0);
  flush();
  std::lock_guard lock(mutex_);
  pid_ = -1;
  return true;
}

void systemd_supervisor::flush() {
  unsigned mark = 0;
  {
    std::lock_guard lock(mutex_);
    mark = ++flushes_sent_;
  }
  const std::string message = std::string(kFlushMarker) + std::to_string(mark);
  const sockaddr_un address = unix_address(notify_path_);
  unique_fd sender(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sender || ::sendto(sender.get(), message.data(), message.size(), 0,
                          reinterpret_cast<const sockaddr*>(&address), sizeof address) < 0) {
    fail("send to the notification socket");
  }
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return flushes_done_ >= mark; });
}

void systemd_supervisor::receive_loop() {
  for (;;) {
    pollfd ready[2] = {{notify_socket_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    const int polled = ::poll(ready, 2, watchdog_wait_ms());
    if (polled < 0) continue;  // EINTR
    if (polled == 0) {
      enforce_watchdog();
      continue;
    }
    if (ready[1].revents != 0) return;
    if (std::optional<notification> got = read_notification(notify_socket_.get())) {
      handle(got->sender, got->text, std::move(got->fds));
    }
  }
}

int systemd_supervisor::watchdog_wait_ms() const {
  std::lock_guard lock(mutex_);
  if (options_.watchdog.count() == 0 || pid_ <= 0 || !ready_) return -1;
  const auto due = last_ping_ + options_.watchdog;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(due - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::int64_t>(left.count(), 0));
}

void systemd_supervisor::enforce_watchdog() {
  std::lock_guard lock(mutex_);
  if (options_.watchdog.count() == 0 || pid_ <= 0 || !ready_) return;
  if (std::chrono::steady_clock::now() < last_ping_ + options_.watchdog) return;
  ::kill(pid_, SIGKILL);
  ++watchdog_kills_;
  ready_ = false;  // no more checks until the next start's READY=1
  changed_.notify_all();
}

void systemd_supervisor::handle(pid_t sender, std::string_view message,
                                std::vector<unique_fd> fds) {
  std::lock_guard lock(mutex_);
  if (sender == ::getpid() && message.starts_with(kFlushMarker)) {
    message.remove_prefix(kFlushMarker.size());
    flushes_done_ = static_cast<unsigned>(std::stoul(std::string(message)));
    changed_.notify_all();
    return;
  }
  if (sender <= 0 || sender != pid_) return;  // NotifyAccess=main
  notifications_.emplace_back(message);
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start < message.size();) {
    const std::size_t end = std::min(message.find('\n', start), message.size());
    if (end > start) lines.push_back(message.substr(start, end - start));
    start = end + 1;
  }
  const auto has = [&lines](std::string_view line) {
    return std::find(lines.begin(), lines.end(), line) != lines.end();
  };
  const auto value = [&lines](std::string_view key) -> std::optional<std::string_view> {
    for (const auto line : lines) {
      if (line.starts_with(key)) return line.substr(key.size());
    }
    return std::nullopt;
  };
  // A barrier has no other content: its fd closes on return, which is the answer.
  if (has("BARRIER=1")) return;
  if (has("READY=1")) {
    ready_ = true;
    last_ping_ = std::chrono::steady_clock::now();
  }
  if (const auto text = value("STATUS=")) status_ = *text;
  if (has("WATCHDOG=1")) {
    ++pings_;
    last_ping_ = std::chrono::steady_clock::now();
  }
  const std::string name(value("FDNAME=").value_or("stored"));
  if (has("FDSTOREREMOVE=1")) forget(name);
  if (has("FDSTORE=1") && valid_fd_name(name)) store(name, std::move(fds));
  changed_.notify_all();
}

void systemd_supervisor::store(const std::string& name, std::vector<unique_fd> fds) {
  for (auto& fd : fds) {
    if (store_.size() >= options_.fd_store_max) return;  // systemd refuses the rest too
    const bool known = std::any_of(store_.begin(), store_.end(), [&fd](const stored_fd& each) {
      return same_file(each.fd.get(), fd.get());
    });
    if (!known) store_.push_back({name, std::move(fd)});
  }
}

void systemd_supervisor::forget(const std::string& name) {
  std::erase_if(store_, [&name](const stored_fd& each) { return each.name == name; });
}

void systemd_supervisor::remove_stored(const std::string& name) {
  std::lock_guard lock(mutex_);
  forget(name);
}

void systemd_supervisor::add_stored(const std::string& name, unique_fd fd) {
  std::lock_guard lock(mutex_);
  std::vector<unique_fd> fds;
  fds.push_back(std::move(fd));
  store(name, std::move(fds));
}

pid_t systemd_supervisor::pid() const {
  std::lock_guard lock(mutex_);
  return pid_;
}

bool systemd_supervisor::running() const {
  const pid_t child = pid();
  return child > 0 && !ended(child);
}

int systemd_supervisor::stored_descriptor(const std::string& name) const {
  std::lock_guard lock(mutex_);
  for (const stored_fd& each : store_) {
    if (each.name == name) return each.fd.get();
  }
  return -1;
}

std::vector<std::string> systemd_supervisor::stored_names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> names;
  for (const auto& each : store_) names.push_back(each.name);
  return names;
}

std::size_t systemd_supervisor::stored_count() const {
  std::lock_guard lock(mutex_);
  return store_.size();
}

std::vector<std::string> systemd_supervisor::notifications() const {
  std::lock_guard lock(mutex_);
  return notifications_;
}

std::string systemd_supervisor::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}

unsigned systemd_supervisor::watchdog_kills() const {
  std::lock_guard lock(mutex_);
  return watchdog_kills_;
}

unsigned systemd_supervisor::watchdog_pings() const {
  std::lock_guard lock(mutex_);
  return pings_;
}

bool systemd_supervisor::wait_for(std::function<bool()> condition,
                                  std::chrono::milliseconds within) const {
  const auto deadline = std::chrono::steady_clock::now() + within;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::size_t systemd_supervisor::open_fd_count() const {
  return testing::open_fd_count(pid());
}

gpumem::Client systemd_supervisor::connect(const std::string& label) const {
  return gpumem::Client::connect({.socket_path = socket_path_, .label = label});
}

std::string systemd_supervisor::log_tail(std::size_t bytes) const {
  const unique_fd log(::open((folder_ + "/daemon.log").c_str(), O_RDONLY | O_CLOEXEC));
  struct stat info {};
  if (!log || ::fstat(log.get(), &info) != 0) return {};
  const auto size = static_cast<std::size_t>(info.st_size);
  const std::size_t from = size > bytes ? size - bytes : 0;
  std::string text(size - from, '\0');
  const ssize_t got = ::pread(log.get(), text.data(), text.size(), static_cast<off_t>(from));
  text.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  return text;
}

}  // namespace gpumem::testing
