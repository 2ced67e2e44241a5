// The client's CUDA reservation range on the fake driver: chunks imported, mapped with the
// access asked for, and every handle given back in order, without a GPU.
#include "cuda_range_mapper.hpp"

#include <gtest/gtest.h>

#include "chunk_mapping.hpp"
#include "support/fake_driver.hpp"

namespace gpumem::detail {
namespace {

using gpumem::testing::fake;
using gpumem::testing::fake_driver;
using gpumem::testing::fake_primary_context;
using gpumem::testing::kind;

constexpr std::size_t kChunk = 2u << 20;
const CUcontext kCallers = fake_primary_context(7);

/// Chunks with @p ids; the fake imports any descriptor, so they come without one.
chunk_listing listing(const std::vector<std::uint64_t>& ids) {
  chunk_listing made;
  made.head.committed_chunks = ids.size();
  made.ids = ids;
  made.fds.resize(ids.size());
  return made;
}

CUdeviceptr at(const range_mapper& range, std::size_t index) {
  return reinterpret_cast<CUdeviceptr>(range.base()) + index * kChunk;
}

class CudaRangeMapper : public ::testing::Test {
 protected:
  void SetUp() override {
    gpumem::testing::reset_fake_driver();
    fake().current = kCallers;
  }
  void TearDown() override {
    for (const auto& misuse : fake().misuse) ADD_FAILURE() << misuse;
    EXPECT_EQ(fake().current, kCallers) << "the caller's context is put back";
  }
};

TEST_F(CudaRangeMapper, MapsChunksWithTheirAccessAndGivesEverythingBack) {
  {
    cuda_range_mapper range(fake_driver(), 1, 4 * kChunk, kChunk);
    EXPECT_EQ(fake().retains[1], 1);
    EXPECT_EQ(fake().live_count(kind::range), 1u);
    range.map(0, -1, Access::read_write);
    range.map(2, -1, Access::read_only);
    EXPECT_EQ(fake().live_count(kind::mapping), 2u);
    EXPECT_EQ(fake().live_count(kind::allocation), 2u);
    EXPECT_EQ(fake().access[at(range, 0)], CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(fake().access[at(range, 2)], CU_MEM_ACCESS_FLAGS_PROT_READ);
    range.unmap(2);
    range.unmap(3);  // nothing there: nothing to do
    EXPECT_EQ(fake().live_count(kind::mapping), 1u);
    EXPECT_EQ(fake().live_count(kind::allocation), 1u);
  }
  EXPECT_EQ(fake().live_count(kind::mapping), 0u);
  EXPECT_EQ(fake().live_count(kind::allocation), 0u);
  EXPECT_EQ(fake().live_count(kind::range), 0u);
  EXPECT_EQ(fake().retained(), 0);
}

TEST_F(CudaRangeMapper, AChunkThatCannotBeMappedLeavesItsSlotEmpty) {
  cuda_range_mapper range(fake_driver(), 1, 2 * kChunk, kChunk);
  fake().failing = "cuMemSetAccess";
  EXPECT_THROW(range.map(1, -1, Access::read_only), CudaError);
  EXPECT_EQ(fake().live_count(kind::mapping), 0u);
  EXPECT_EQ(fake().live_count(kind::allocation), 0u);
  fake().failing.clear();
  range.map(1, -1, Access::read_only);
  EXPECT_EQ(fake().live_count(kind::mapping), 1u);
}

TEST_F(CudaRangeMapper, AVersionChangeMapsTheNewChunksReadOnly) {
  auto owned = std::make_unique<cuda_range_mapper>(fake_driver(), 1, 3 * kChunk, kChunk);
  const cuda_range_mapper& range = *owned;
  chunk_mapping mapping(std::move(owned), 3);
  mapping.apply(listing({1, 2}), Access::read_write);
  EXPECT_EQ(fake().made[kind::mapping], 2);
  mapping.apply(listing({1, 2, 3}), Access::read_write);
  EXPECT_EQ(fake().made[kind::mapping], 3) << "a chunk committed at the end maps only itself";
  mapping.apply(listing({4, 5, 6}), Access::read_only);
  EXPECT_EQ(fake().made[kind::mapping], 6);
  EXPECT_EQ(fake().live_count(kind::mapping), 3u);
  EXPECT_EQ(fake().live_count(kind::allocation), 3u);
  for (std::size_t index = 0; index < 3; ++index) {
    EXPECT_EQ(fake().access[at(range, index)], CU_MEM_ACCESS_FLAGS_PROT_READ);
  }
  mapping.clear();
  EXPECT_EQ(fake().live_count(kind::mapping), 0u);
  EXPECT_EQ(fake().live_count(kind::range), 1u) << "the range stays reserved";
}

}  // namespace
}  // namespace gpumem::detail
