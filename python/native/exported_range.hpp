#pragma once
/// @file
/// @brief What an export without copies (a DLPack capsule, a memoryview) hands out: a range of
/// memory as it is at the time of the export, and the owner that keeps that memory alive while
/// the export lives. Buffers, reservations and drafts describe themselves this way.

#include <cstddef>
#include <memory>
#include <string>

#include "gpumem/gpumem.hpp"

namespace gpumem::python {

struct exported_range {
  void* data = nullptr;
  std::size_t size = 0;
  int device = kHost;  ///< gpumem::kHost or a CUDA device
  bool read_only = false;
  std::shared_ptr<const void> owner;  ///< held by the export until its consumer lets go
};

/// @brief How __repr__ names a device: "host" or "cuda:N".
inline std::string device_name(int device) {
  return device == kHost ? "host" : "cuda:" + std::to_string(device);
}

}  // namespace gpumem::python
