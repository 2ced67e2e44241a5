// gpumem_test_peer: a client process for the multi-process tests, driven by its arguments.
//   hold-new NAME|- SIZE SEED   allocate, fill, print "ready ID", wait to be killed
//   hold-open NAME              open, print "ready ID", wait to be killed
//   verify NAME SIZE SEED       open, check the bytes, print "ok" (exit 0) or why not (exit 1)
//   fork-holder SIZE            allocate, fork a child that keeps the socket, print
//                               "ready CHILD_PID", wait to be killed
//   lease-slab SIZE             lease a slab, take a piece, print "ready ID", wait to be killed
//   verify-piece NAME SLAB OFFSET SIZE SEED
//                               open a slab by name, check one piece, print "ok" or why not
//   lock-count LOCK BUFFER N    N times: lock, increment a plain counter, unlock; "done"
//   lock-hold LOCK              lock, print "held", wait to be killed
//   lock-hold-with LOCK SIZE    allocate SIZE anonymous bytes, lock, print "held", wait to be
//                               killed
//   allocate-until-error PREFIX SIZE
//                               allocate PREFIX0, PREFIX1, ... filled with their number as
//                               seed, printing "made NAME" after each, until a call fails;
//                               then print "stopped" and hold them until killed
//   barrier-rounds NAME PARTIES ROUNDS BUFFER
//                               ROUNDS rounds of arrive_and_wait, checking every party's
//                               progress word; print "done", "broken R" or "behind R"
//   barrier-join NAME PARTIES   join, print "ready PARTY", wait to be killed
//   channel-produce NAME ITEMS CONSUMERS SLOTS BYTES
//   channel-consume NAME ITEMS CONSUMERS SLOTS BYTES
//                               pass ITEMS patterned items; the consumer checks each and
//                               prints "ok ITEMS", "mismatch I" or "broken I"
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "gpumem/slab.hpp"
#include "pattern.hpp"

namespace {

[[noreturn]] void wait_forever() {
  for (;;) ::pause();
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int count_under_lock(gpumem::Client& client, const char* lock_name, const char* buffer_name,
                     std::uint64_t iterations) {
  auto lock = client.lock(lock_name);
  auto buffer = client.open(buffer_name);
  auto* counter = static_cast<std::uint64_t*>(buffer.data());
  for (std::uint64_t i = 0; i < iterations; ++i) {
    std::scoped_lock hold(lock);
    // A read, a yield, a write: any overlap of two holders loses increments.
    const std::uint64_t seen = *counter;
    std::this_thread::yield();
    *counter = seen + 1;
  }
  say("done");
  return 0;
}

int barrier_rounds(gpumem::Client& client, const char* name, std::uint32_t parties,
                   std::uint32_t rounds, const char* buffer_name) {
  auto barrier = client.barrier(name, parties);
  auto buffer = client.open(buffer_name);
  auto* progress = static_cast<std::uint32_t*>(buffer.data());
  for (std::uint32_t round = 1; round <= rounds; ++round) {
    std::atomic_ref<std::uint32_t>(progress[barrier.party()]).store(round);
    if (barrier.arrive_and_wait() != gpumem::BarrierStatus::ok) {
      say("broken " + std::to_string(round));
      return 1;
    }
    for (std::uint32_t party = 0; party < parties; ++party) {
      if (std::atomic_ref<std::uint32_t>(progress[party]).load() < round) {
        say("behind " + std::to_string(round));
        return 1;
      }
    }
  }
  say("done");
  return 0;
}

int pass_items(gpumem::Client& client, bool producing, char** argv) {
  const std::uint64_t items = std::stoull(argv[3]);
  const gpumem::ChannelOptions options{
      .slots = static_cast<std::uint32_t>(std::stoul(argv[5])),
      .slot_bytes = std::stoull(argv[6]),
      .consumers = static_cast<std::uint32_t>(std::stoul(argv[4]))};
  auto channel = client.channel(
      argv[2], producing ? gpumem::ChannelRole::producer : gpumem::ChannelRole::consumer, options);
  for (std::uint64_t item = 0; item < items; ++item) {
    const auto slot = producing ? channel.acquire_slot() : channel.acquire();
    if (slot.status != gpumem::BarrierStatus::ok || slot.sequence != item) {
      say("broken " + std::to_string(item));
      return 1;
    }
    const auto seed = static_cast<std::uint32_t>(item);
    if (producing) {
      gpumem::testing::fill_pattern(slot.data, options.slot_bytes, seed);
      channel.publish();
      continue;
    }
    if (gpumem::testing::first_mismatch(slot.data, options.slot_bytes, seed) !=
        options.slot_bytes) {
      say("mismatch " + std::to_string(item));
      return 1;
    }
    channel.release();
  }
  say(producing ? "done" : "ok " + std::to_string(items));
  return 0;
}

int run(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  auto client = gpumem::Client::connect({.label = "peer-" + command});
  if (command == "hold-new" && argc == 5) {
    const std::string name = argv[2];
    const std::size_t size = std::stoull(argv[3]);
    auto buffer = client.allocate(size, {.name = name == "-" ? "" : name});
    gpumem::testing::fill_pattern(buffer.data(), size,
                                  static_cast<std::uint32_t>(std::stoul(argv[4])));
    say("ready " + std::to_string(buffer.id()));
    wait_forever();
  }
  if (command == "allocate-until-error" && argc == 4) {
    const std::size_t size = std::stoull(argv[3]);
    std::vector<gpumem::Buffer> held;
    try {
      for (std::uint32_t index = 0;; ++index) {
        const std::string name = argv[2] + std::to_string(index);
        held.push_back(client.allocate(size, {.name = name}));
        gpumem::testing::fill_pattern(held.back().data(), size, index);
        say("made " + name);
      }
    } catch (const gpumem::Error&) {
      say("stopped");
    }
    wait_forever();
  }
  if (command == "hold-open" && argc == 3) {
    auto buffer = client.open(argv[2]);
    say("ready " + std::to_string(buffer.id()));
    wait_forever();
  }
  if (command == "verify" && argc == 5) {
    auto buffer = client.open(argv[2], {.access = gpumem::Access::read_only});
    const std::size_t size = std::stoull(argv[3]);
    if (buffer.size() != size) {
      say("size " + std::to_string(buffer.size()));
      return 1;
    }
    const auto bad = gpumem::testing::first_mismatch(
        buffer.data(), size, static_cast<std::uint32_t>(std::stoul(argv[4])));
    say(bad == size ? "ok" : "mismatch at " + std::to_string(bad));
    return bad == size ? 0 : 1;
  }
  if (command == "fork-holder" && argc == 3) {
    auto buffer = client.allocate(std::stoull(argv[2]));
    const pid_t child = ::fork();
    if (child == 0) wait_forever();  // keeps a copy of the socket, never execs
    say("ready " + std::to_string(child));
    wait_forever();
  }
  if (command == "lease-slab" && argc == 3) {
    auto slab = gpumem::Slab::lease(client, std::stoull(argv[2]));
    slab.allocate(4096);
    say("ready " + std::to_string(slab.buffer().id()));
    wait_forever();
  }
  if (command == "verify-piece" && argc == 7) {
    auto slab = client.open(argv[2], {.access = gpumem::Access::read_only});
    const gpumem::SlabPiece piece{std::stoull(argv[3]), std::stoull(argv[4]), std::stoull(argv[5])};
    const auto seed = static_cast<std::uint32_t>(std::stoul(argv[6]));
    const auto bad = gpumem::testing::first_mismatch(slab.at(piece), piece.size, seed);
    say(bad == piece.size ? "ok" : "mismatch at " + std::to_string(bad));
    return bad == piece.size ? 0 : 1;
  }
  if (command == "lock-count" && argc == 5) {
    return count_under_lock(client, argv[2], argv[3], std::stoull(argv[4]));
  }
  if (command == "lock-hold-with" && argc == 4) {
    auto buffer = client.allocate(std::stoull(argv[3]));
    auto lock = client.lock(argv[2]);
    lock.lock();
    say("held");
    wait_forever();
  }
  if (command == "lock-hold" && argc == 3) {
    auto lock = client.lock(argv[2]);
    lock.lock();
    say("held");
    wait_forever();
  }
  if (command == "barrier-rounds" && argc == 6) {
    return barrier_rounds(client, argv[2], static_cast<std::uint32_t>(std::stoul(argv[3])),
                          static_cast<std::uint32_t>(std::stoul(argv[4])), argv[5]);
  }
  if (command == "barrier-join" && argc == 4) {
    auto barrier = client.barrier(argv[2], static_cast<std::uint32_t>(std::stoul(argv[3])));
    say("ready " + std::to_string(barrier.party()));
    wait_forever();
  }
  if ((command == "channel-produce" || command == "channel-consume") && argc == 7) {
    return pass_items(client, command == "channel-produce", argv);
  }
  std::fprintf(stderr, "gpumem_test_peer: bad arguments\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const gpumem::Error& error) {
    say(std::string("error ") + std::to_string(static_cast<int>(error.status())) + " " +
        error.what());
    return 3;
  }
}
