#pragma once
/// @file
/// @brief The DLPack ABI (dmlc/dlpack, include/dlpack/dlpack.h, version 1.1), as far as gpumem
/// exports it: the legacy DLManagedTensor of DLPack 0.x and DLManagedTensorVersioned of 1.x,
/// under dlpack.h's own names. Written out here because Debian 12 ships DLPack 0.6, which has no
/// versioned tensor; the layouts are pinned below, as consumers read them by offset.

#include <cstddef>
#include <cstdint>

namespace gpumem::python::dlpack {

inline constexpr std::uint32_t kMajorVersion = 1;
inline constexpr std::uint32_t kMinorVersion = 0;

/// Capsule names of the Python DLPack protocol. A consumer renames the capsule ("used_dltensor",
/// "used_dltensor_versioned") once it owns the tensor; then the capsule must not delete it.
inline constexpr char kCapsuleName[] = "dltensor";
inline constexpr char kVersionedCapsuleName[] = "dltensor_versioned";

enum DLDeviceType : std::int32_t { kDLCPU = 1, kDLCUDA = 2 };
enum DLDataTypeCode : std::uint8_t { kDLUInt = 1 };
inline constexpr std::uint64_t kFlagReadOnly = 1u << 0;  // DLPACK_FLAG_BITMASK_READ_ONLY

struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};

struct DLDevice {
  DLDeviceType device_type;
  std::int32_t device_id;
};

struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  ///< may not be null when ndim > 0 (DLPack 1.1)
  std::uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};

static_assert(sizeof(DLDevice) == 8);
static_assert(sizeof(DLDataType) == 4);
static_assert(sizeof(DLTensor) == 48 && offsetof(DLTensor, device) == 8 &&
              offsetof(DLTensor, ndim) == 16 && offsetof(DLTensor, dtype) == 20 &&
              offsetof(DLTensor, shape) == 24 && offsetof(DLTensor, strides) == 32 &&
              offsetof(DLTensor, byte_offset) == 40);
static_assert(sizeof(DLManagedTensor) == 64 && offsetof(DLManagedTensor, manager_ctx) == 48 &&
              offsetof(DLManagedTensor, deleter) == 56);
static_assert(sizeof(DLManagedTensorVersioned) == 80 &&
              offsetof(DLManagedTensorVersioned, manager_ctx) == 8 &&
              offsetof(DLManagedTensorVersioned, deleter) == 16 &&
              offsetof(DLManagedTensorVersioned, flags) == 24 &&
              offsetof(DLManagedTensorVersioned, dl_tensor) == 32);

}  // namespace gpumem::python::dlpack
