// On a real driver: a pool import that fails after the primary context was retained gives the
// retain back. The driver's own state says so: this process retains nothing else, so the
// device's primary context is active exactly while an import holds it.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include "cuda_imports.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::detail {
namespace {

bool primary_context_active(const cuda::driver_api& cu, CUdevice device) {
  unsigned flags = 0;
  int active = 0;
  EXPECT_EQ(cu.cuDevicePrimaryCtxGetState(device, &flags, &active), CUDA_SUCCESS);
  return active != 0;
}

TEST(GpuImports, AFailedPoolImportLeavesThePrimaryContextAsItWas) {
  std::string why_not;
  const cuda::driver_api* cu = cuda::driver(&why_not);
  if (cu == nullptr) GTEST_SKIP() << "no CUDA driver here: " << why_not;
  CUdevice device = 0;
  ASSERT_EQ(cu->cuDeviceGet(&device, 0), CUDA_SUCCESS);
  if (primary_context_active(*cu, device)) GTEST_SKIP() << "something else holds the context";

  // The check can see a retain: one held, then given back.
  {
    cuda::primary_context held;
    ASSERT_EQ(cuda::primary_context::retain(*cu, device, held), CUDA_SUCCESS);
    ASSERT_TRUE(primary_context_active(*cu, device));
  }
  ASSERT_FALSE(primary_context_active(*cu, device));

  // A memfd is no CUDA pool: the import fails after the context was retained and made current.
  const unique_fd not_a_pool(::memfd_create("not-a-pool", MFD_CLOEXEC));
  ASSERT_TRUE(not_a_pool);
  proto::pool_reply reply{};
  reply.device = 0;
  cuda_imports imports(*cu, true);
  try {
    imports.import_pool(reply, not_a_pool.get());
    ADD_FAILURE() << "a memfd imported as a CUDA pool";
  } catch (const CudaError& error) {
    EXPECT_NE(std::string(error.what()).find("cuMemPoolImportFromShareableHandle"),
              std::string::npos)
        << error.what();
  }
  EXPECT_FALSE(primary_context_active(*cu, device)) << "the failed import kept its retain";
}

}  // namespace
}  // namespace gpumem::detail
