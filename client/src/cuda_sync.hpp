#pragma once
/// @file
/// @brief The CUDA calls behind stream-ordered and device locks, barriers and channels:
/// mapping a device's signal page, registering the host page, and stream memory operations.
/// Built without CUDA, each throws Error(not_supported).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "gpumem/gpumem.hpp"

namespace gpumem::detail::cuda_sync {

/// @brief Memory this process made visible to devices (a mapped signal page, the registered
/// host page): its device address while it lives. Destroying it undoes the mapping or the
/// registration.
class device_mapping {
 public:
  struct owners;  ///< the CUDA handles behind it (cuda_sync.cpp)

  device_mapping() noexcept;
  device_mapping(std::uint64_t address, std::unique_ptr<owners> held) noexcept;
  device_mapping(device_mapping&&) noexcept;
  device_mapping& operator=(device_mapping&&) noexcept;
  ~device_mapping();

  std::uint64_t address() const noexcept { return address_; }
  explicit operator bool() const noexcept { return address_ != 0; }

 private:
  std::uint64_t address_ = 0;
  std::unique_ptr<owners> owners_;
};

/// @brief Maps the signal page exported as @p fd (closed by the caller) for @p device; the
/// address is valid in every context of the process.
device_mapping map_signal_page(int fd, int device, std::size_t size);

/// @brief Lets streams write to the host page (a stream-ordered release clears its queue
/// entry there). The page must outlive the result.
device_mapping register_host_page(void* page, std::size_t size);

enum class wait_kind { equal, at_least };

/// One 32-bit word a stream writes.
struct value_write {
  std::uint64_t address;
  std::uint32_t value;
};

/// @brief Stream memory operations on one stream, with the stream's context current while this
/// lives (the caller's comes back after). A lock, barrier or channel call makes one and looks
/// the context and device up once: each lookup is a driver call on the hand-off's critical
/// path, and sync_bench measured them against a bare cuStreamWrite/WaitValue32 ping-pong.
class stream_ops {
 public:
  /// @param stream nullptr: the default stream of the current context (device 0's primary
  /// context when the caller has none).
  explicit stream_ops(Stream stream);
  ~stream_ops();
  stream_ops(const stream_ops&) = delete;
  stream_ops& operator=(const stream_ops&) = delete;

  /// The device the stream's work runs on.
  int device() const noexcept { return device_; }
  void wait_value(std::uint64_t address, std::uint32_t value, wait_kind kind);
  void write_value(std::uint64_t address, std::uint32_t value);
  /// @brief Queues @p writes, in their order, as one submission (cuStreamBatchMemOp).
  void write_values(std::span<const value_write> writes);

 private:
  Stream stream_;
  void* previous_context_ = nullptr;  ///< the caller's, put back when it was changed
  bool changed_ = false;
  int device_ = 0;
};

}  // namespace gpumem::detail::cuda_sync
