#pragma once
/// @file
/// @brief The CUDA driver API, loaded at run time from libcuda.so.1: nothing links against the
/// driver, so gpumemd and libgpumem start on machines without a GPU or a driver and simply
/// report the CUDA backend as unavailable there.

#include <cuda.h>

#include <source_location>
#include <stdexcept>
#include <string>

namespace gpumem::cuda {

// Every driver entry point gpumem calls, by its unversioned name.
#define GPUMEM_CUDA_DRIVER_API(X)       \
  X(cuInit)                             \
  X(cuGetErrorName)                     \
  X(cuGetErrorString)                   \
  X(cuDeviceGet)                        \
  X(cuDeviceGetCount)                   \
  X(cuDeviceGetAttribute)               \
  X(cuDeviceTotalMem)                   \
  X(cuDeviceCanAccessPeer)              \
  X(cuDevicePrimaryCtxRetain)           \
  X(cuDevicePrimaryCtxRelease)          \
  X(cuDevicePrimaryCtxGetState)         \
  X(cuCtxSetCurrent)                    \
  X(cuCtxGetCurrent)                    \
  X(cuCtxGetDevice)                     \
  X(cuStreamCreate)                     \
  X(cuStreamDestroy)                    \
  X(cuStreamSynchronize)                \
  X(cuStreamQuery)                      \
  X(cuStreamWaitEvent)                  \
  X(cuStreamGetCtx)                     \
  X(cuStreamWriteValue32)               \
  X(cuStreamWaitValue32)                \
  X(cuStreamBatchMemOp)                 \
  X(cuEventCreate)                      \
  X(cuEventDestroy)                     \
  X(cuEventRecord)                      \
  X(cuEventQuery)                       \
  X(cuIpcGetEventHandle)                \
  X(cuIpcOpenEventHandle)               \
  X(cuMemPoolCreate)                    \
  X(cuMemPoolDestroy)                   \
  X(cuMemPoolSetAttribute)              \
  X(cuMemPoolGetAttribute)              \
  X(cuMemPoolSetAccess)                 \
  X(cuMemPoolExportToShareableHandle)   \
  X(cuMemPoolImportFromShareableHandle) \
  X(cuMemPoolExportPointer)             \
  X(cuMemPoolImportPointer)             \
  X(cuMemAllocFromPoolAsync)            \
  X(cuMemFreeAsync)                     \
  X(cuMemFree)                          \
  X(cuMemGetAllocationGranularity)      \
  X(cuMemCreate)                        \
  X(cuMemRelease)                       \
  X(cuMemExportToShareableHandle)       \
  X(cuMemImportFromShareableHandle)     \
  X(cuMemAddressReserve)                \
  X(cuMemAddressFree)                   \
  X(cuMemMap)                           \
  X(cuMemUnmap)                         \
  X(cuMemSetAccess)                     \
  X(cuMemsetD32)                        \
  X(cuMemsetD8)                         \
  X(cuMemcpyDtoH)                       \
  X(cuMemcpy2DAsync)                    \
  X(cuMemcpyHtoD)                       \
  X(cuMemHostRegister)                  \
  X(cuMemHostUnregister)                \
  X(cuMemHostGetDevicePointer)

/// Function pointers to the driver; the members carry the names of cuda.h (with its _v2
/// suffixes where cuda.h maps a name to one, so calls read like plain driver calls).
struct driver_api {
#define GPUMEM_X(name) decltype(&::name) name = nullptr;
  GPUMEM_CUDA_DRIVER_API(GPUMEM_X)
#undef GPUMEM_X
};

/// @brief The driver, loaded and initialised once per process (thread-safe).
/// @return nullptr when there is none; @p why_not (if given) then says why, e.g.
///         "libcuda.so.1: cannot open shared object file" or "cuInit: no CUDA-capable device".
const driver_api* driver(std::string* why_not = nullptr) noexcept;

/// A failed driver call: the status, the call and where it was made.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(CUresult status, const std::string& what)
      : std::runtime_error(what), status_(status) {}
  CUresult status() const noexcept { return status_; }

 private:
  CUresult status_;
};

/// @brief Name and text of a status, e.g. "CUDA_ERROR_INVALID_VALUE (invalid argument)".
std::string describe(CUresult status);

/// @brief What a failed call says, e.g. "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY (out of
/// memory) at daemon/memory/cuda_reservation.cpp:61".
std::string failure_text(CUresult status, const char* call, const std::source_location& where);

/// @brief Throws cuda_error naming @p call and the caller's location unless @p status is
/// CUDA_SUCCESS.
void check(CUresult status, const char* call,
           std::source_location where = std::source_location::current());

}  // namespace gpumem::cuda
