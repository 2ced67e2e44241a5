#include "cuda_imports.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <source_location>
#include <string>

#include "gpumem/gpumem.hpp"
#include "support/fake_driver.hpp"

namespace gpumem::detail {
namespace {

using gpumem::testing::fake;
using gpumem::testing::fake_driver;
using gpumem::testing::fake_primary_context;
using gpumem::testing::kind;

const CUcontext kCallers = fake_primary_context(7);

proto::pool_reply pool_on_device(int device) {
  proto::pool_reply reply{};
  reply.pool_id = 3;
  reply.device = device;
  reply.ready_event[0] = 1;  // a daemon of this uid sends its ready event
  return reply;
}

std::size_t live_driver_objects() {
  return fake().live_count(kind::pool) + fake().live_count(kind::stream) +
         fake().live_count(kind::event);
}

class CudaImports : public ::testing::Test {
 protected:
  void SetUp() override {
    gpumem::testing::reset_fake_driver();
    fake().current = kCallers;
  }
  void TearDown() override {
    for (const auto& misuse : fake().misuse) ADD_FAILURE() << misuse;
  }
};

TEST_F(CudaImports, AnImportedPoolHoldsItsContextUntilItGoes) {
  cuda_imports imports(fake_driver(), true);
  auto home = imports.import_pool(pool_on_device(1), 5);
  EXPECT_EQ(fake().retains[1], 1);
  EXPECT_EQ(fake().live_count(kind::pool), 1u);
  EXPECT_EQ(fake().live_count(kind::stream), 1u);  // the bridge
  EXPECT_EQ(fake().live_count(kind::event), 2u);   // ready, bridged
  EXPECT_EQ(fake().current, kCallers);
  home.reset();
  EXPECT_EQ(fake().retains[1], 0);
  EXPECT_EQ(live_driver_objects(), 0u);
  EXPECT_EQ(fake().current, kCallers);
}

TEST_F(CudaImports, APoolOfADaemonOfAnotherUidComesWithoutItsReadyEvent) {
  cuda_imports imports(fake_driver(), false);
  proto::pool_reply reply = pool_on_device(1);
  reply.ready_event[0] = 0;
  auto home = imports.import_pool(reply, 5);
  EXPECT_EQ(fake().live_count(kind::event), 1u) << "the bridge's event only";
  home.reset();
  EXPECT_EQ(live_driver_objects(), 0u);
}

// Every driver call import_pool makes, failing in turn: whatever was made before it goes again.
class CudaImportsFailing : public CudaImports, public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaImportsFailing, ImportPoolLeavesNothingBehind) {
  cuda_imports imports(fake_driver(), true);
  const int retained_before = fake().retained();
  fake().failing = GetParam();
  try {
    imports.import_pool(pool_on_device(1), 5);
    ADD_FAILURE() << "import_pool succeeded although " << GetParam() << " failed";
  } catch (const CudaError& error) {
    EXPECT_EQ(error.status(), errc::cuda_error);
    EXPECT_EQ(error.cuda_status(), fake().fail_with);
    EXPECT_TRUE(std::string(error.where().file_name()).ends_with("cuda_imports.cpp"));
    EXPECT_NE(std::string(error.what()).find(error.where().file_name()), std::string::npos);
    EXPECT_NE(std::string(error.what()).find(":" + std::to_string(error.where().line())),
              std::string::npos);
    EXPECT_NE(std::string(error.where().function_name()).find("import_pool"), std::string::npos)
        << error.where().function_name();
    // A program built against the header of the last release reads where() as the
    // std::source_location it was then (abi/libgpumem.abi): the same bytes must still be one.
    static_assert(sizeof(CallSite) == sizeof(std::source_location));
    std::source_location as_released;
    std::memcpy(static_cast<void*>(&as_released), &error.where(), sizeof as_released);
    EXPECT_STREQ(as_released.file_name(), error.where().file_name());
    EXPECT_EQ(as_released.line(), error.where().line());
  }
  EXPECT_EQ(fake().retained(), retained_before);
  EXPECT_EQ(live_driver_objects(), 0u);
  EXPECT_EQ(fake().current, kCallers);
}

INSTANTIATE_TEST_SUITE_P(EachCall, CudaImportsFailing,
                         ::testing::Values("cuDeviceGet", "cuDevicePrimaryCtxRetain",
                                           "cuCtxSetCurrent", "cuMemPoolImportFromShareableHandle",
                                           "cuIpcOpenEventHandle", "cuStreamCreate",
                                           "cuEventCreate"));

}  // namespace
}  // namespace gpumem::detail
