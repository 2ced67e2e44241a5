// Where gpumemd's log goes: to the journal with sd-daemon priority prefixes when
// $JOURNAL_STREAM names its stderr (systemd.exec(5)), else to stderr with its own timestamps.
// A real daemon whose stderr is a pipe the test reads; the shell that starts it sets
// $JOURNAL_STREAM to that pipe's device and inode, as systemd does for its journal stream.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <optional>
#include <regex>
#include <string>

#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/temporary_folder.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

/// gpumemd on a socket in a fresh folder, its stderr on the pipe read_line() reads, started by
/// a shell that first sets $JOURNAL_STREAM to @p journal_stream (a shell expression).
struct logged_daemon {
  explicit logged_daemon(const std::string& journal_stream)
      : folder(make_temporary_folder("log")),
        socket(folder + "/gpumemd.sock"),
        process({"/bin/sh", "-c",
                 "JOURNAL_STREAM=" + journal_stream + " exec '" + daemon_binary() + "' --socket " +
                     socket + " --log-level debug"},
                {}, {.stderr_to_stdout = true, .user = std::nullopt}) {}
  ~logged_daemon() {
    process.signal(SIGTERM);
    process.wait(20s);
    std::error_code ignored;
    std::filesystem::remove_all(folder, ignored);
  }
  /// Lines until one contains @p text (that one included); empty when none comes in time.
  std::vector<std::string> lines_until(const std::string& text) {
    std::vector<std::string> seen;
    while (const auto line = process.read_line(10s)) {
      seen.push_back(*line);
      if (line->find(text) != std::string::npos) return seen;
    }
    return {};
  }

  std::string folder;
  std::string socket;
  child_process process;
};

// stat's %d and %i are the st_dev and st_ino of the file, in decimal, as systemd writes them;
// /proc/self/fd/2 of stat is the shell's stderr, the pipe.
constexpr const char* kStderrOfTheShell = "$(stat -L -c %d:%i /proc/self/fd/2)";

TEST(JournalStream, LinesCarryTheirSyslogPriorityAndNoTimestampOfTheirOwn) {
  logged_daemon daemon(kStderrOfTheShell);
  const auto started = daemon.lines_until("listening on");
  ASSERT_FALSE(started.empty());
  const std::regex prefixed(R"(<[0-7]>[^<\[].*)");
  for (const auto& line : started) {
    EXPECT_TRUE(std::regex_match(line, prefixed)) << line;
  }
  EXPECT_EQ(started.back().rfind("<6>gpumemd ", 0), 0u) << started.back();
  // A client's connection is logged at debug, priority 7.
  Client::connect({.socket_path = daemon.socket}).ping();
  const auto connected = daemon.lines_until("connected: pid");
  ASSERT_FALSE(connected.empty());
  EXPECT_EQ(connected.back().rfind("<7>client ", 0), 0u) << connected.back();
  // A reload says what it changed at info.
  daemon.process.signal(SIGHUP);
  const auto reloaded = daemon.lines_until("configuration reloaded");
  ASSERT_FALSE(reloaded.empty());
  EXPECT_EQ(reloaded.back().rfind("<6>SIGHUP: configuration reloaded", 0), 0u) << reloaded.back();
}

TEST(JournalStream, NamingAnotherFileKeepsTheTimestampedFormat) {
  // systemd.exec(5): stderr redirected since systemd set the variable is not the journal.
  logged_daemon daemon("1:1");
  const auto started = daemon.lines_until("listening on");
  ASSERT_FALSE(started.empty());
  const std::regex stamped(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[gpumemd\] \[\w+\] .*)");
  EXPECT_TRUE(std::regex_match(started.back(), stamped)) << started.back();
  EXPECT_EQ(started.back().find('<'), std::string::npos) << started.back();
}

}  // namespace
}  // namespace gpumem::testing
