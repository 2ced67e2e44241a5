#include "live.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include "field.hpp"
#include "gpumem/events.hpp"
#include "table.hpp"

namespace gpumemctl {

namespace {

using gpumem::Event;
using gpumem::EventKind;

/// "2026-11-03T12:00:01.234Z"
std::string utc_text(std::chrono::system_clock::time_point time) {
  const auto since_epoch =
      std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch());
  const std::time_t seconds = static_cast<std::time_t>(since_epoch.count() / 1000);
  std::tm parts{};
  ::gmtime_r(&seconds, &parts);
  char text[40];
  const std::size_t length = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &parts);
  return std::string(text, length) + '.' +
         std::to_string(1000 + since_epoch.count() % 1000).substr(1) + 'Z';
}

constexpr field<Event> kEventFields[] = {
    {"", "sequence", member<&Event::sequence>},
    {"", "time", [](const Event& e) -> json { return utc_text(e.time); }},
    {"", "kind", [](const Event& e) -> json { return gpumem::to_string(e.kind); }},
    {"", "client", member<&Event::client>},
    {"", "pid", member<&Event::pid>},
    {"", "uid", member<&Event::uid>},
    // Text a kind of event does not carry (a connect's request or object) is null.
    {"", "label", member_or_null<&Event::label>},
    {"", "bytes", member<&Event::bytes>},
    {"", "count", member<&Event::count>},
    {"", "code", [](const Event& e) -> json { return static_cast<std::uint32_t>(e.code); }},
    {"", "error",
     [](const Event& e) -> json {
       return e.code == gpumem::errc::ok ? json(nullptr)
                                         : json(std::string(gpumem::proto::describe(e.code)));
     }},
    {"", "request", member_or_null<&Event::request>},
    {"", "object", member_or_null<&Event::object>},
    {"", "reason", member_or_null<&Event::reason>},
};

std::string who(const Event& e) {
  std::string text = "client " + std::to_string(e.client) + " (pid " + std::to_string(e.pid) +
                     " uid " + std::to_string(e.uid);
  if (!e.label.empty()) text += " " + e.label;
  return text + ")";
}

std::string line_of(const Event& e) {
  std::string line =
      utc_text(e.time) + " #" + std::to_string(e.sequence) + " " + gpumem::to_string(e.kind) + " ";
  switch (e.kind) {
    case EventKind::connected:
    case EventKind::disconnected:
    case EventKind::died:
      return line + who(e);
    case EventKind::reclaimed:
      return line + who(e) + ": " + bytes_text(e.bytes) + " and " + std::to_string(e.count) +
             " object(s) it owned";
    case EventKind::owner_died:
      return line + "lock " + e.object + ": its holder " +
             (e.client != 0 ? who(e) : "pid " + std::to_string(e.pid)) + " " +
             (e.reason.empty() ? "died holding it" : e.reason);
    case EventKind::refused:
      line += (e.request.empty() ? "a request" : e.request) + " of " + who(e) + ": " +
              std::string(gpumem::proto::describe(e.code)) + ": " + e.reason;
      if (e.count > 0) line += " (" + std::to_string(e.count) + " more refusals held back)";
      return line;
    case EventKind::lost:
      return line + std::to_string(e.count) + " event(s): this reader was too slow";
  }
  return line;
}

}  // namespace

void metrics(gpumem::Client& client, bool as_json) {
  const std::string text = client.metrics();
  if (as_json) {
    std::cout << json{{"metrics", text}}.dump(2) << '\n';
    return;
  }
  std::cout << text;
}

namespace {

/// How long a stream that gpumemd ended (a restart) is tried again before events gives up: as
/// long as a client's call waits for a restarted daemon (ConnectOptions::reconnect_for).
constexpr std::chrono::seconds kResubscribeFor{10};

/// A new subscription once gpumemd is back, or the error that ended the old one when it does
/// not come back within kResubscribeFor.
gpumem::EventStream resubscribe(const gpumem::ConnectOptions& options, const gpumem::Error& ended) {
  const auto give_up = std::chrono::steady_clock::now() + kResubscribeFor;
  auto pause = std::chrono::milliseconds(50);
  for (;;) {
    try {
      return gpumem::EventStream::open(options);
    } catch (const gpumem::Error& error) {
      // Away, closing, slow to take the hello in a restart, or full of clients coming back.
      if (error.status() != gpumem::errc::io_error &&
          error.status() != gpumem::errc::connection_closed &&
          error.status() != gpumem::errc::timed_out &&
          error.status() != gpumem::errc::quota_exceeded) {
        throw;
      }
    }
    if (std::chrono::steady_clock::now() >= give_up) throw ended;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace

void events(gpumem::Client& client, bool as_json) {
  const gpumem::ConnectOptions options{.socket_path = client.socket_path(), .label = "events"};
  auto stream = gpumem::EventStream::open(options);
  if (!as_json) {
    std::cerr << (stream.every_uid() ? "events of every uid\n"
                                     : "events of your uid (every uid's: root or admin_group)\n");
  }
  std::uint64_t last_seen = 0;
  for (;;) {
    std::optional<Event> event;
    try {
      event = stream.next(std::chrono::hours(1));
    } catch (const gpumem::Error& error) {
      if (error.status() != gpumem::errc::connection_closed) throw;
      // gpumemd went away (a restart): the stream goes on once it is back, and what happened
      // meanwhile shows as a gap in the numbers, which a restarted gpumemd continues.
      if (!as_json) {  // with --json, stdout has the events and the gap in their numbers
        std::cerr << "gpumemd at " << client.socket_path()
                  << " ended the event stream; subscribing again ("
                  << (last_seen == 0 ? std::string("none was shown before; ")
                                     : "events after #" + std::to_string(last_seen) + " ")
                  << "events until then are not shown)\n";
      }
      stream = resubscribe(options, error);
      continue;
    }
    if (!event) continue;
    last_seen = event->sequence;
    // Flushed line by line: the reader may be a pipe, waiting for each event as it comes.
    std::cout << (as_json ? record_json(*event, kEventFields).dump() : line_of(*event))
              << std::endl;
  }
}

}  // namespace gpumemctl
