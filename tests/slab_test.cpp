#include "gpumem/slab.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <random>

#include "support/child_process.hpp"
#include "support/daemon_process.hpp"
#include "support/pattern.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;

errc status_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const gpumem::Error& error) {
    return error.status();
  }
  return errc::ok;
}

TEST(Slab, PiecesAreAlignedDisjointAndComeBackWhenFreed) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto slab = Slab::lease(client, 1 << 20);
  std::mt19937 random(3);
  std::vector<SlabPiece> pieces;
  for (int i = 0; i < 200; ++i) pieces.push_back(slab.allocate(1 + random() % 3000));
  std::sort(pieces.begin(), pieces.end(),
            [](const SlabPiece& a, const SlabPiece& b) { return a.offset < b.offset; });
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].offset % Slab::kAlignment, 0u);
    if (i > 0) {
      EXPECT_GE(pieces[i].offset, pieces[i - 1].offset + pieces[i - 1].size);
    }
  }
  for (const auto& piece : pieces) slab.free(piece);
  EXPECT_EQ(slab.bytes_free(), std::size_t{1} << 20);
  EXPECT_EQ(client.stats().pools.at(0).allocations, 1u) << "pieces never reach the daemon";
}

TEST(Slab, APieceTravelsToAnotherProcessAsSlabOffsetAndSize) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto slab = Slab::lease(client, 1 << 20, {.name = "decoder"});
  slab.allocate(1000);
  const SlabPiece piece = slab.allocate(50000);
  fill_pattern(slab.data(piece), piece.size, 8);
  auto reader = child_process({peer_binary(), "verify-piece", "decoder", std::to_string(piece.slab),
                               std::to_string(piece.offset), std::to_string(piece.size), "8"},
                              {daemon.socket_env()});
  EXPECT_EQ(reader.read_line(), "ok");
  EXPECT_EQ(exit_code(*reader.wait()), 0);
}

TEST(Slab, MisuseIsAClearErrorThatChangesNothing) {
  daemon_process daemon;
  auto client = daemon.connect();
  auto slab = Slab::lease(client, 64 << 10);
  const auto piece = slab.allocate(1024);
  EXPECT_EQ(status_of([&] { slab.allocate(0); }), errc::invalid_argument);
  EXPECT_EQ(status_of([&] { slab.allocate(1 << 20); }), errc::out_of_memory);
  EXPECT_EQ(status_of([&] {
              slab.free({piece.slab, piece.offset + 256, 1024});
            }),
            errc::invalid_argument);
  EXPECT_EQ(status_of([&] {
              slab.free({piece.slab + 1, piece.offset, 1024});
            }),
            errc::invalid_argument);
  EXPECT_EQ(status_of([&] {
              (void)slab.buffer().at({piece.slab, 64 << 10, 1});
            }),
            errc::invalid_argument);
  EXPECT_EQ(status_of([&] { Slab::lease(client, 10); }), errc::invalid_argument);
  slab.free(piece);
  EXPECT_EQ(status_of([&] { slab.free(piece); }), errc::invalid_argument) << "double free";
  EXPECT_EQ(slab.bytes_free(), std::size_t{64} << 10);
}

TEST(Slab, ASlabIsReclaimedWithItsClient) {
  daemon_process daemon;
  auto watcher = daemon.connect();
  auto holder =
      child_process({peer_binary(), "lease-slab", std::to_string(8 << 20)}, {daemon.socket_env()});
  const auto line = holder.read_line();
  ASSERT_TRUE(line && line->starts_with("ready"));
  EXPECT_EQ(watcher.stats().pools.at(0).bytes_in_use, 8u << 20);
  holder.signal(SIGKILL);
  EXPECT_TRUE(daemon.wait_for_bytes_in_use(0, 1s));
}

}  // namespace
}  // namespace gpumem::testing
