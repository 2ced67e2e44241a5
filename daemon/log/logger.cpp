#include "log/logger.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <string>

namespace gpumem::daemon::log {

namespace {
/// Writes each line to stderr as "<PRIORITY>message". The loop and the worker threads (sleep
/// and wake copies, spare CUDA blocks) log, so lines are written under a mutex.
class journal_stream_sink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(message, formatted);
    const std::string prefix = "<" + std::to_string(syslog_priority(message.level)) + ">";
    // The journal reads a stream line by line: every line of a message needs the prefix, or
    // its continuation would be logged at the default priority.
    std::string out;
    std::string_view rest(formatted.data(), formatted.size());
    while (!rest.empty()) {
      const std::size_t end = rest.find('\n');
      const std::string_view line = rest.substr(0, end);
      out += prefix;
      out += line;
      out += '\n';
      rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    }
    write_all(out);
  }
  void flush_() override {}

 private:
  static void write_all(std::string_view text) {
    while (!text.empty()) {
      const ssize_t written = ::write(STDERR_FILENO, text.data(), text.size());
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) return;  // the journal went away: nothing better to tell it
      text.remove_prefix(static_cast<std::size_t>(written));
    }
  }
};

template <class Number>
bool parse_number(std::string_view text, Number& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc{} && end == text.data() + text.size() && !text.empty();
}
}  // namespace

int syslog_priority(spdlog::level::level_enum level) noexcept {
  switch (level) {
    case spdlog::level::critical:
      return 2;  // LOG_CRIT
    case spdlog::level::err:
      return 3;  // LOG_ERR
    case spdlog::level::warn:
      return 4;  // LOG_WARNING
    case spdlog::level::info:
      return 6;  // LOG_INFO
    default:
      return 7;  // LOG_DEBUG
  }
}

bool names_stderr(std::string_view journal_stream) noexcept {
  const std::size_t colon = journal_stream.find(':');
  if (colon == std::string_view::npos) return false;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  if (!parse_number(journal_stream.substr(0, colon), device) ||
      !parse_number(journal_stream.substr(colon + 1), inode)) {
    return false;
  }
  struct stat error_stream {};
  return ::fstat(STDERR_FILENO, &error_stream) == 0 && error_stream.st_dev == device &&
         error_stream.st_ino == inode;
}

std::shared_ptr<spdlog::logger> make_daemon_logger() {
  // systemd.exec(5): stderr may have been redirected since systemd set the variable (a
  // wrapper's 2>file); only when it still is the journal's stream do the prefixes belong.
  const char* journal_stream = std::getenv("JOURNAL_STREAM");
  if (journal_stream != nullptr && names_stderr(journal_stream)) {
    auto sink = std::make_shared<journal_stream_sink>();
    sink->set_pattern("%v");
    return std::make_shared<spdlog::logger>("gpumemd", std::move(sink));
  }
  return spdlog::stderr_color_mt("gpumemd");
}

}  // namespace gpumem::daemon::log
