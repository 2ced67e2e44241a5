// gpumem_gpu_peer: a CUDA client process for the GPU tests, driven by its arguments.
//   produce NAME SIZE SEED   allocate on device 0, fill on the GPU, print "ready ID"; on
//                            SIGTERM release and print "released"
//   hold NAME                open, print "ready ID"; on SIGTERM release and print "released"
//   release-and-stay NAME    open, fill on the GPU, release, print "released", wait to be
//                            killed
//   consume NAME SIZE SEED   open, check on the GPU, print "ok" or "bad N", release
//   churn SIZE ROUNDS        allocate, fill, check and release ROUNDS times on one stream,
//                            print "ok" or "bad round R: N"
//   bandwidth NAME SIZE      open, print "shared GB/s own GB/s" for the same read kernel
//   reservation-verify NAME SIZE SEED
//                            open a reservation read-only, check SIZE bytes, print "ok"
//   reservation-write NAME   open a reservation read-only, write through a kernel, print
//                            "refused ERROR" or "wrote"
//   reservation-hold NAME BYTES
//                            reserve and commit BYTES, print "ready ID", wait to be killed
//   consume-on DEVICE NAME SIZE SEED
//                            as consume, with the stream and the check on DEVICE
//   consume-piece NAME SLAB OFFSET SIZE SEED
//                            open a slab by name, check one piece on the GPU
//   reservation-own NAME MAX INITIAL SEED GROWN GROWN_SEED
//                            reserve MAX bytes with INITIAL committed, fill them with SEED,
//                            print "ready ID"; then on SIGUSR1 grow to GROWN, fill the new part
//                            with GROWN_SEED, check both parts, print "grown SIZE"; on SIGUSR2
//                            check GROWN bytes for GROWN_SEED + 1 written from the start by
//                            another holder (the new part then differs from this process's
//                            fill, which began at INITIAL), print "ok"; on SIGTERM release and
//                            print "released"
//   free-memory              print "free BYTES", the device's free memory as this process sees it
//   reservation-watch NAME LAST
//                            open a reservation read-only, print "mapped VERSION POINTER"; then
//                            wait for each next version up to LAST, check its bytes for the seed
//                            VERSION and print "version V ok POINTER" or "version V bad N"
//   reservation-hold-still NAME SIZE SEED
//                            open a reservation read-only and map it, print "ready", never
//                            refresh; on SIGTERM check SIZE bytes for SEED, print "ok" or "bad N"
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "gpumem/gpumem.hpp"
#include "gpumem/reservation.hpp"
#include "gpumem/slab.hpp"
#include "kernels.hpp"

namespace {

using namespace gpumem::testing;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

/// The signals the commands wait for; blocked before CUDA starts its threads.
sigset_t awaited_signals() {
  sigset_t awaited;
  sigemptyset(&awaited);
  sigaddset(&awaited, SIGTERM);
  sigaddset(&awaited, SIGUSR1);
  sigaddset(&awaited, SIGUSR2);
  return awaited;
}

int wait_for_signal() {
  const sigset_t awaited = awaited_signals();
  int signal = 0;
  sigwait(&awaited, &signal);
  return signal;
}

void wait_for_sigterm() {
  while (wait_for_signal() != SIGTERM) {
  }
}

int run(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  const sigset_t awaited = awaited_signals();
  pthread_sigmask(SIG_BLOCK, &awaited, nullptr);  // before CUDA starts its threads
  if (command == "consume-on" && argc == 6) use_device(std::stoi(argv[2]));
  auto client = gpumem::Client::connect({.label = "gpu-peer-" + command});
  stream_t stream = make_stream();
  if (command == "produce" && argc == 5) {
    const std::size_t size = std::stoull(argv[3]);
    auto buffer = client.allocate(size, {.device = 0, .name = argv[2], .stream = stream});
    fill_on_device(buffer.data(), size, static_cast<std::uint32_t>(std::stoul(argv[4])), stream);
    synchronize(stream);  // consumers only sync on the allocation, not on this fill
    say("ready " + std::to_string(buffer.id()));
    wait_for_sigterm();
    buffer.release();
    synchronize(stream);
    say("released");
    return 0;
  }
  if (command == "hold" && argc == 3) {
    auto buffer = client.open(argv[2], {.stream = stream});
    say("ready " + std::to_string(buffer.id()));
    wait_for_sigterm();
    buffer.release();
    say("released");
    return 0;
  }
  if (command == "release-and-stay" && argc == 3) {
    auto buffer = client.open(argv[2], {.stream = stream});
    fill_on_device(buffer.data(), buffer.size(), 9, stream);
    buffer.release();  // marked with this process's release event, which the daemon keeps
    synchronize(stream);
    say("released");
    wait_for_sigterm();  // the test kills it, its release event still kept by the daemon
    return 0;
  }
  if ((command == "consume" && argc == 5) || (command == "consume-on" && argc == 6)) {
    char** rest = command == "consume" ? argv + 2 : argv + 3;  // NAME SIZE SEED
    const std::size_t size = std::stoull(rest[1]);
    auto buffer = client.open(rest[0], {.access = gpumem::Access::read_only, .stream = stream});
    if (buffer.size() != size) {
      say("bad size " + std::to_string(buffer.size()));
      return 1;
    }
    const auto bad = mismatches_on_device(buffer.data(), size,
                                          static_cast<std::uint32_t>(std::stoul(rest[2])), stream);
    say(bad == 0 ? "ok" : "bad " + std::to_string(bad));
    return bad == 0 ? 0 : 1;
  }
  if (command == "churn" && argc == 4) {
    const std::size_t size = std::stoull(argv[2]);
    const int rounds = std::stoi(argv[3]);
    for (int round = 0; round < rounds; ++round) {
      auto buffer = client.allocate(size, {.device = 0, .stream = stream});
      const auto seed = static_cast<std::uint32_t>(round * 7 + 1);
      fill_on_device(buffer.data(), size, seed, stream);
      const auto bad = mismatches_on_device(buffer.data(), size, seed, stream);
      if (bad != 0) {
        say("bad round " + std::to_string(round) + ": " + std::to_string(bad));
        return 1;
      }
    }
    synchronize(stream);
    say("ok");
    return 0;
  }
  if (command == "bandwidth" && argc == 4) {
    const std::size_t size = std::stoull(argv[3]);
    auto shared = client.open(argv[2], {.stream = stream});
    synchronize(stream);
    const double shared_rate = read_bandwidth(shared.data(), size, stream, 20);
    void* own = device_malloc(size);
    const double own_rate = read_bandwidth(own, size, stream, 20);
    device_free(own);
    std::printf("%.1f %.1f\n", shared_rate, own_rate);
    std::fflush(stdout);
    return 0;
  }
  if (command == "reservation-verify" && argc == 5) {
    auto range = gpumem::Reservation::open(client, argv[2], {.access = gpumem::Access::read_only});
    const std::size_t size = std::stoull(argv[3]);
    if (range.size() != size) {
      say("size " + std::to_string(range.size()));
      return 1;
    }
    const auto bad = mismatches_on_device(range.data(), size,
                                          static_cast<std::uint32_t>(std::stoul(argv[4])), stream);
    say(bad == 0 ? "ok" : "bad " + std::to_string(bad));
    return bad == 0 ? 0 : 1;
  }
  if (command == "reservation-write" && argc == 3) {
    auto range = gpumem::Reservation::open(client, argv[2], {.access = gpumem::Access::read_only});
    const std::string error = try_write_on_device(range.data(), stream);
    say(error.empty() ? "wrote" : "refused " + error);
    ::_exit(0);  // the context is broken after a fault: leave without CUDA teardown
  }
  if (command == "reservation-hold" && argc == 4) {
    const std::size_t bytes = std::stoull(argv[3]);
    auto range = gpumem::Reservation::create(client, bytes, {.name = argv[2], .initial = bytes});
    say("ready " + std::to_string(range.id()));
    wait_for_sigterm();
    return 0;
  }
  if (command == "consume-piece" && argc == 7) {
    auto slab = client.open(argv[2], {.stream = stream});
    const gpumem::SlabPiece piece{std::stoull(argv[3]), std::stoull(argv[4]), std::stoull(argv[5])};
    const auto bad = mismatches_on_device(slab.at(piece), piece.size,
                                          static_cast<std::uint32_t>(std::stoul(argv[6])), stream);
    say(bad == 0 ? "ok" : "bad " + std::to_string(bad));
    return bad == 0 ? 0 : 1;
  }
  if (command == "reservation-own" && argc == 8) {
    const std::size_t initial = std::stoull(argv[4]);
    const auto seed = static_cast<std::uint32_t>(std::stoul(argv[5]));
    const std::size_t grown = std::stoull(argv[6]);
    const auto grown_seed = static_cast<std::uint32_t>(std::stoul(argv[7]));
    auto range = gpumem::Reservation::create(client, std::stoull(argv[3]),
                                             {.device = 0, .name = argv[2], .initial = initial});
    if (range.size() != initial || grown <= initial) {
      say("size " + std::to_string(range.size()));
      return 1;
    }
    auto* const base = static_cast<std::uint8_t*>(range.data());
    fill_on_device(base, initial, seed, stream);
    synchronize(stream);
    say("ready " + std::to_string(range.id()));
    for (;;) {
      const int signal = wait_for_signal();
      if (signal == SIGTERM) break;
      if (signal == SIGUSR1) {
        range.resize(grown);
        if (range.size() != grown) {
          say("size " + std::to_string(range.size()));
          continue;
        }
        fill_on_device(base + initial, grown - initial, grown_seed, stream);
        const auto old_bad = mismatches_on_device(base, initial, seed, stream);
        const auto new_bad =
            mismatches_on_device(base + initial, grown - initial, grown_seed, stream);
        say(old_bad + new_bad == 0
                ? "grown " + std::to_string(range.size())
                : "bad " + std::to_string(old_bad) + " bytes of the first " +
                      std::to_string(initial) + ", " + std::to_string(new_bad) + " of the rest");
      } else if (range.size() != grown) {
        say("not grown");
      } else {
        const auto bad = mismatches_on_device(base, grown, grown_seed + 1, stream);
        say(bad == 0 ? "ok" : "bad " + std::to_string(bad) + " of " + std::to_string(grown));
      }
    }
    range.release();
    say("released");
    return 0;
  }
  if (command == "reservation-watch" && argc == 4) {
    auto range = gpumem::Reservation::open(client, argv[2], {.access = gpumem::Access::read_only});
    const std::uint64_t last = std::stoull(argv[3]);
    const auto pointer = std::to_string(reinterpret_cast<std::uintptr_t>(range.data()));
    say("mapped " + std::to_string(range.version()) + " " + pointer);
    while (range.version() < last) {
      if (!range.wait_version(range.version() + 1, std::chrono::seconds(60))) {
        say("timed out at version " + std::to_string(range.version()));
        return 1;
      }
      const auto bad = mismatches_on_device(range.data(), range.size(),
                                            static_cast<std::uint32_t>(range.version()), stream);
      say("version " + std::to_string(range.version()) +
          (bad == 0 ? " ok " + std::to_string(reinterpret_cast<std::uintptr_t>(range.data()))
                    : " bad " + std::to_string(bad)));
    }
    return 0;
  }
  if (command == "reservation-hold-still" && argc == 5) {
    auto range = gpumem::Reservation::open(client, argv[2], {.access = gpumem::Access::read_only});
    say("ready");
    wait_for_sigterm();
    const auto bad = mismatches_on_device(range.data(), std::stoull(argv[3]),
                                          static_cast<std::uint32_t>(std::stoul(argv[4])), stream);
    say(bad == 0 ? "ok" : "bad " + std::to_string(bad));
    return 0;
  }
  if (command == "free-memory" && argc == 2) {
    say("free " + std::to_string(device_free_memory()));
    return 0;
  }
  std::fprintf(stderr, "gpumem_gpu_peer: bad arguments\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    say(std::string("error ") + error.what());
    return 3;
  }
}
