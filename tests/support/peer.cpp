// gpumem_test_peer: a client process for the multi-process tests, driven by its arguments.
//   hold-new NAME|- SIZE SEED   allocate, fill, print "ready ID", wait to be killed
//   hold-open NAME              open, print "ready ID", wait to be killed
//   verify NAME SIZE SEED       open, check the bytes, print "ok" (exit 0) or why not (exit 1)
//   fork-holder SIZE            allocate, fork a child that keeps the socket, print
//                               "ready CHILD_PID", wait to be killed
//   lease-slab SIZE             lease a slab, take a piece, print "ready ID", wait to be killed
//   verify-piece NAME SLAB OFFSET SIZE SEED
//                               open a slab by name, check one piece, print "ok" or why not
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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
