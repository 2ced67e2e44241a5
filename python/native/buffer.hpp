#pragma once
/// @file
/// @brief gpumem.Buffer: the memory of a gpumem::Buffer as Python sees it, exported without
/// copies through DLPack, the buffer protocol (host memory) and __cuda_array_interface__ (CUDA
/// memory). Every export holds the memory: it is let go when the Buffer and all its exports are.
/// __cuda_array_interface__ consumers hold the Buffer object instead, so once it has been read
/// the object itself holds the memory until it is deallocated.

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>

#include "exported_range.hpp"
#include "gpumem/gpumem.hpp"

namespace gpumem::python {

class shared_buffer {
 public:
  /// @brief Owns @p buffer: release() and the last reference let go of it.
  explicit shared_buffer(Buffer buffer);
  /// @brief Views memory that another object owns (a channel's slots) and keeps it alive.
  static shared_buffer borrowed(std::shared_ptr<Buffer> memory);

  /// @brief The memory, for an export to hold.
  /// @throws BufferError once released.
  const std::shared_ptr<Buffer>& memory() const;
  /// @brief The whole buffer, held by the export.
  /// @throws BufferError once released.
  exported_range exported() const;
  /// @brief Lets go of this object's reference: when no export holds the memory, at once,
  /// after the work queued on @p last_use (None: the buffer's stream), reporting failure;
  /// else the last export lets go of it later, after the work queued on the buffer's stream,
  /// which for CUDA memory first waits (an event, no host wait) for the work queued so far
  /// on @p last_use.
  /// @throws Error(cuda_error) when that wait cannot be queued; the buffer stays unreleased.
  void release(pybind11::handle last_use);
  bool released() const noexcept { return memory_ == nullptr; }
  /// @brief Keeps the memory until this object is deallocated, release() notwithstanding: for
  /// consumers that hold this object rather than the memory (__cuda_array_interface__).
  /// @throws BufferError once released.
  void hold_until_deallocated();

  std::size_t size() const noexcept { return size_; }
  std::uint64_t id() const noexcept { return id_; }
  int device() const noexcept { return device_; }
  bool read_only() const noexcept { return read_only_; }
  std::uintptr_t pointer() const;
  Stream stream() const;

 private:
  shared_buffer(std::shared_ptr<Buffer> memory, bool owned);

  std::shared_ptr<Buffer> memory_;
  std::shared_ptr<Buffer> held_until_deallocated_;
  bool owned_ = true;
  std::size_t size_ = 0;
  std::uint64_t id_ = 0;
  int device_ = kHost;
  bool read_only_ = false;
};

/// @brief Memory that Python owns, released without the GIL when the last holder goes.
std::shared_ptr<Buffer> share(Buffer buffer);

void bind_buffer(pybind11::module_& module);

}  // namespace gpumem::python
