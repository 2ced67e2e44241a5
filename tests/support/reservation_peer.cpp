// gpumem_test_reservation_peer: a process holding or owning a host reservation, for
// reservation_test, driven by its arguments. Version V of a reservation holds the pattern
// seeded with V (support/pattern.hpp) over all of its bytes.
//   verify NAME SIZE SEED      open read-only, check SIZE bytes of SEED: "ok" (exit 0) or why not
//   read-versions NAME LAST    open read-only; until version LAST is mapped: wait_version(next,
//                              100 ms), then check the whole of the version mapped, each round;
//                              "saw V SIZE" once per version, "done" after LAST; "torn V AT",
//                              "moved" (data() changed) or "lost WHY" and exit 1 otherwise
//   write NAME ro|rw           open, "writing", store a byte at data() (where the mapping is
//                              read-only the fault exits 3), "wrote"
//   hold NAME SEED             open read-only, check, "ready CLIENT_ID"; on SIGUSR1 check again
//                              without a refresh: "ok" or "mismatch at N"; wait to be killed
//   own-drafting NAME SIZE     make NAME of SIZE bytes (version 1, seed 1), begin version 2 of
//                              SIZE bytes, fill its first half (seed 2), "drafting"; wait to be
//                              killed
//   own-asleep NAME SIZE SEED  make NAME of SIZE bytes, fill them, put it to sleep, "asleep";
//                              wait to be killed
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"
#include "pattern.hpp"

namespace {

using namespace std::chrono_literals;

[[noreturn]] void wait_forever() {
  for (;;) ::pause();
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::uint32_t seed_of(const char* text) {
  return static_cast<std::uint32_t>(std::stoul(text));
}

/// "ok" when @p size bytes from @p data hold @p seed's pattern, else where they differ.
bool check(const void* data, std::size_t size, std::uint32_t seed) {
  const auto bad = gpumem::testing::first_mismatch(data, size, seed);
  say(bad == size ? "ok" : "mismatch at " + std::to_string(bad));
  return bad == size;
}

int read_versions(gpumem::Client& client, const char* name, std::uint64_t last) {
  auto reservation = gpumem::Reservation::open(client, name, {.access = gpumem::Access::read_only});
  void* const start = reservation.data();
  std::uint64_t reported = 0;
  try {
    for (;;) {
      reservation.wait_version(reported + 1, 100ms);
      if (reservation.data() != start) {
        say("moved");
        return 1;
      }
      const std::uint64_t version = reservation.version();
      const std::size_t size = reservation.size();
      const auto bad = gpumem::testing::first_mismatch(reservation.data(), size,
                                                       static_cast<std::uint32_t>(version));
      if (bad != size) {
        say("torn " + std::to_string(version) + " " + std::to_string(bad));
        return 1;
      }
      if (version != reported) {
        reported = version;
        say("saw " + std::to_string(version) + " " + std::to_string(size));
      }
      if (reported >= last) {
        say("done");
        return 0;
      }
    }
  } catch (const gpumem::Error& error) {
    say(std::string("lost ") + error.what());
    return 1;
  }
}

int hold(gpumem::Client& client, const char* name, std::uint32_t seed) {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::sigprocmask(SIG_BLOCK, &usr1, nullptr);  // before "ready": the test may signal at once
  auto reservation = gpumem::Reservation::open(client, name, {.access = gpumem::Access::read_only});
  const std::size_t size = reservation.size();
  if (gpumem::testing::first_mismatch(reservation.data(), size, seed) != size) {
    say("mismatch before");
    return 1;
  }
  say("ready " + std::to_string(client.id()));
  int signal = 0;
  ::sigwait(&usr1, &signal);
  check(reservation.data(), size, seed);
  wait_forever();
}

/// The exit status of `write` when the write faults.
constexpr int kWriteFaulted = 3;

int run(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  auto client = gpumem::Client::connect({.label = "reservation-" + command});
  if (command == "verify" && argc == 5) {
    auto reservation =
        gpumem::Reservation::open(client, argv[2], {.access = gpumem::Access::read_only});
    const std::size_t size = std::stoull(argv[3]);
    if (reservation.size() != size) {
      say("size " + std::to_string(reservation.size()));
      return 1;
    }
    return check(reservation.data(), size, seed_of(argv[4])) ? 0 : 1;
  }
  if (command == "read-versions" && argc == 4) {
    return read_versions(client, argv[2], std::stoull(argv[3]));
  }
  if (command == "write" && argc == 4) {
    const std::string access = argv[3];
    auto reservation = gpumem::Reservation::open(
        client, argv[2],
        {.access = access == "ro" ? gpumem::Access::read_only : gpumem::Access::read_write});
    // A handler of its own: under a sanitizer the fault would end in its abort, not SIGSEGV.
    struct sigaction on_fault {};
    on_fault.sa_handler = [](int) { ::_exit(kWriteFaulted); };
    ::sigaction(SIGSEGV, &on_fault, nullptr);
    say("writing");
    *static_cast<volatile char*>(reservation.data()) = 1;
    say("wrote");
    return 0;
  }
  if (command == "hold" && argc == 4) return hold(client, argv[2], seed_of(argv[3]));
  if (command == "own-drafting" && argc == 4) {
    const std::size_t size = std::stoull(argv[3]);
    auto reservation = gpumem::Reservation::create(
        client, size, {.device = gpumem::kHost, .name = argv[2], .initial = size});
    gpumem::testing::fill_pattern(reservation.data(), size, 1);
    auto draft = reservation.begin_version(size);
    gpumem::testing::fill_pattern(draft.data(), size / 2, 2);
    say("drafting");
    wait_forever();
  }
  if (command == "own-asleep" && argc == 5) {
    const std::size_t size = std::stoull(argv[3]);
    auto reservation = gpumem::Reservation::create(
        client, size, {.device = gpumem::kHost, .name = argv[2], .initial = size});
    gpumem::testing::fill_pattern(reservation.data(), size, seed_of(argv[4]));
    reservation.sleep();
    say("asleep");
    wait_forever();
  }
  say("usage: see the head of reservation_peer.cpp");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    say(std::string("error ") + error.what());
    return 1;
  }
}
