#include <gtest/gtest.h>

#include "gpumem/shared/cuda/handles.hpp"
#include "support/fake_driver.hpp"

namespace gpumem::cuda {
namespace {

using gpumem::testing::fake;
using gpumem::testing::fake_driver;
using gpumem::testing::fake_primary_context;
using gpumem::testing::kind;

const CUcontext kMadeIn = fake_primary_context(0);
const CUcontext kCallers = fake_primary_context(7);
char registered_bytes[64];

// One row per owner: how to make one, the driver call that does, and how many are alive.
struct context_case {
  using owner = primary_context;
  static constexpr const char* call = "cuDevicePrimaryCtxRetain";
  static CUresult make(owner& out) { return primary_context::retain(fake_driver(), 0, out); }
  static std::size_t live() { return static_cast<std::size_t>(fake().retained()); }
};
struct stream_case {
  using owner = stream;
  static constexpr const char* call = "cuStreamCreate";
  static CUresult make(owner& out) { return stream::create(fake_driver(), kMadeIn, 0, out); }
  static std::size_t live() { return fake().live_count(kind::stream); }
};
struct event_case {
  using owner = event;
  static constexpr const char* call = "cuEventCreate";
  static CUresult make(owner& out) { return event::create(fake_driver(), kMadeIn, 0, out); }
  static std::size_t live() { return fake().live_count(kind::event); }
};
struct opened_event_case {
  using owner = event;
  static constexpr const char* call = "cuIpcOpenEventHandle";
  static CUresult make(owner& out) { return event::open_ipc(fake_driver(), kMadeIn, {}, out); }
  static std::size_t live() { return fake().live_count(kind::event); }
};
struct created_pool_case {
  using owner = memory_pool;
  static constexpr const char* call = "cuMemPoolCreate";
  static CUresult make(owner& out) { return memory_pool::create(fake_driver(), kMadeIn, {}, out); }
  static std::size_t live() { return fake().live_count(kind::pool); }
};
struct imported_pool_case {
  using owner = memory_pool;
  static constexpr const char* call = "cuMemPoolImportFromShareableHandle";
  static CUresult make(owner& out) {
    return memory_pool::import_fd(fake_driver(), kMadeIn, 5, out);
  }
  static std::size_t live() { return fake().live_count(kind::pool); }
};
struct created_allocation_case {
  using owner = allocation_handle;
  static constexpr const char* call = "cuMemCreate";
  static CUresult make(owner& out) {
    return allocation_handle::create(fake_driver(), 2 << 20, {}, out);
  }
  static std::size_t live() { return fake().live_count(kind::allocation); }
};
struct imported_allocation_case {
  using owner = allocation_handle;
  static constexpr const char* call = "cuMemImportFromShareableHandle";
  static CUresult make(owner& out) { return allocation_handle::import_fd(fake_driver(), 5, out); }
  static std::size_t live() { return fake().live_count(kind::allocation); }
};
struct range_case {
  using owner = address_range;
  static constexpr const char* call = "cuMemAddressReserve";
  static CUresult make(owner& out) {
    return address_range::reserve(fake_driver(), 8 << 20, 2 << 20, out);
  }
  static std::size_t live() { return fake().live_count(kind::range); }
};
struct mapping_case {
  using owner = mapped_range;
  static constexpr const char* call = "cuMemMap";
  static CUresult make(owner& out) {
    static CUdeviceptr next = 1 << 20;
    next += 2 << 20;
    return mapped_range::map(fake_driver(), next, 2 << 20, 9, out);
  }
  static std::size_t live() { return fake().live_count(kind::mapping); }
};
struct registration_case {
  using owner = host_registration;
  static constexpr const char* call = "cuMemHostRegister";
  static CUresult make(owner& out) {
    static std::size_t next = 0;
    return host_registration::register_range(fake_driver(), &registered_bytes[next++ % 64], 1, 0,
                                             out);
  }
  static std::size_t live() { return fake().live_count(kind::registration); }
};

template <class Case>
class OwnerTest : public ::testing::Test {
 protected:
  using owner = typename Case::owner;
  void SetUp() override { gpumem::testing::reset_fake_driver(); }
  void TearDown() override {
    for (const auto& misuse : fake().misuse) ADD_FAILURE() << misuse;
  }
  static owner made() {
    owner out;
    EXPECT_EQ(Case::make(out), CUDA_SUCCESS);
    return out;
  }
};

using every_owner =
    ::testing::Types<context_case, stream_case, event_case, opened_event_case, created_pool_case,
                     imported_pool_case, created_allocation_case, imported_allocation_case,
                     range_case, mapping_case, registration_case>;
TYPED_TEST_SUITE(OwnerTest, every_owner);

TYPED_TEST(OwnerTest, FreesWhatItOwnsOnceWhenDestroyed) {
  {
    auto held = this->made();
    EXPECT_TRUE(held);
    EXPECT_EQ(TypeParam::live(), 1u);
  }
  EXPECT_EQ(TypeParam::live(), 0u);
}

TYPED_TEST(OwnerTest, MovingHandsOverTheHandle) {
  auto first = this->made();
  const auto handle = first.get();
  {
    auto second = std::move(first);
    EXPECT_FALSE(first);  // NOLINT(bugprone-use-after-move): moved-from owners are empty
    EXPECT_EQ(second.get(), handle);
    EXPECT_EQ(TypeParam::live(), 1u);
  }
  EXPECT_EQ(TypeParam::live(), 0u);
}

TYPED_TEST(OwnerTest, MoveAssignmentFreesWhatTheTargetHeld) {
  auto target = this->made();
  auto source = this->made();
  const auto handle = source.get();
  ASSERT_EQ(TypeParam::live(), 2u);
  target = std::move(source);
  EXPECT_EQ(TypeParam::live(), 1u);
  EXPECT_EQ(target.get(), handle);
}

TYPED_TEST(OwnerTest, ReleaseGivesUpOwnershipWithoutFreeing) {
  auto held = this->made();
  const auto handle = held.get();
  EXPECT_EQ(held.release(), handle);
  EXPECT_FALSE(held);
  held.reset();
  EXPECT_EQ(TypeParam::live(), 1u);
}

TYPED_TEST(OwnerTest, ResetFreesAtOnce) {
  auto held = this->made();
  held.reset();
  EXPECT_FALSE(held);
  EXPECT_EQ(TypeParam::live(), 0u);
}

TYPED_TEST(OwnerTest, AFailedCallReturnsTheStatusAndLeavesTheOwnerAsItWas) {
  auto held = this->made();
  const auto handle = held.get();
  fake().failing = TypeParam::call;
  EXPECT_EQ(TypeParam::make(held), fake().fail_with);
  EXPECT_EQ(held.get(), handle);
  EXPECT_EQ(TypeParam::live(), 1u);
}

TEST(ContextOwners, MakeAndDestroyInTheirContextAndGiveTheCallerItsOwnBack) {
  gpumem::testing::reset_fake_driver();
  fake().current = kCallers;
  {
    stream made_stream;
    event made_event;
    memory_pool made_pool;
    ASSERT_EQ(stream::create(fake_driver(), kMadeIn, 0, made_stream), CUDA_SUCCESS);
    ASSERT_EQ(event::create(fake_driver(), kMadeIn, 0, made_event), CUDA_SUCCESS);
    ASSERT_EQ(memory_pool::import_fd(fake_driver(), kMadeIn, 5, made_pool), CUDA_SUCCESS);
    EXPECT_EQ(fake().current, kCallers);
    EXPECT_EQ(made_stream.context(), kMadeIn);
    EXPECT_EQ(made_event.context(), kMadeIn);
    EXPECT_EQ(made_pool.context(), kMadeIn);
  }
  EXPECT_EQ(fake().current, kCallers);
  EXPECT_EQ(fake().live_count(kind::stream) + fake().live_count(kind::event) +
                fake().live_count(kind::pool),
            0u);
  EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();  // none outside their context
}

TEST(ContextOwners, AreNotDestroyedWhenTheirContextCannotBeMadeCurrent) {
  gpumem::testing::reset_fake_driver();
  {
    stream orphan;
    ASSERT_EQ(stream::create(fake_driver(), kMadeIn, 0, orphan), CUDA_SUCCESS);
    fake().failing = "cuCtxSetCurrent";  // the context is gone, or the driver is
  }
  EXPECT_EQ(fake().live_count(kind::stream), 1u);
  EXPECT_TRUE(fake().misuse.empty());
}

TEST(PrimaryContext, RemembersItsDevice) {
  gpumem::testing::reset_fake_driver();
  primary_context context;
  ASSERT_EQ(primary_context::retain(fake_driver(), 3, context), CUDA_SUCCESS);
  EXPECT_EQ(context.device(), 3);
  EXPECT_EQ(context.get(), fake_primary_context(3));
  context.reset();
  EXPECT_EQ(fake().retains[3], 0);
}

TEST(AddressOwners, FreeWithTheSizeTheyWereMadeWith) {
  gpumem::testing::reset_fake_driver();
  {
    address_range range;
    ASSERT_EQ(address_range::reserve(fake_driver(), 6 << 20, 2 << 20, range), CUDA_SUCCESS);
    mapped_range mapped;
    ASSERT_EQ(mapped_range::map(fake_driver(), range.get() + (2 << 20), 2 << 20, 1, mapped),
              CUDA_SUCCESS);
    EXPECT_EQ(range.size(), std::size_t{6} << 20);
    EXPECT_EQ(mapped.size(), std::size_t{2} << 20);
  }
  EXPECT_EQ(fake().live_count(kind::range) + fake().live_count(kind::mapping), 0u);
  EXPECT_TRUE(fake().misuse.empty()) << fake().misuse.front();
}

TEST(ScopedContext, LeavesTheCallersContextAloneWhenTheSwitchFails) {
  gpumem::testing::reset_fake_driver();
  fake().current = kCallers;
  fake().failing = "cuCtxSetCurrent";
  {
    const scoped_context scope(fake_driver(), kMadeIn);
    EXPECT_EQ(scope.status(), fake().fail_with);
    EXPECT_EQ(fake().current, kCallers);
  }
  EXPECT_EQ(fake().current, kCallers);
}

}  // namespace
}  // namespace gpumem::cuda
