#pragma once
/// @file
/// @brief A block of a CUDA pool with its pointer's export data, which opens it in any process
/// that imported the pool.

#include <cuda.h>

namespace gpumem::daemon {

struct exported_block {
  CUdeviceptr pointer = 0;
  CUmemPoolPtrExportData data{};
};

}  // namespace gpumem::daemon
