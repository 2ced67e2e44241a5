#pragma once
/// @file
/// @brief The signal page on a CUDA device: one VMM chunk (stream memory operations are
/// refused on pool memory), mapped in the daemon too so that it can repair words after a
/// death, with a stream of its own for the repairs that must wait their turn.

#include "gpumem/shared/cuda/driver.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "sync/signal_page.hpp"

namespace gpumem::daemon {

class cuda_signal_page final : public signal_page {
 public:
  /// @throws request_error(no_such_device), cuda::cuda_error
  cuda_signal_page(const cuda::driver_api& driver, std::int32_t device);
  ~cuda_signal_page() override;

  int fd() const noexcept override { return exported_.get(); }
  std::uint64_t size() const noexcept override { return size_; }
  std::uint32_t read(std::uint32_t cell, std::size_t offset) override;
  void write(std::uint32_t cell, std::size_t offset, std::uint32_t value) override;
  void pass_turn(std::uint32_t cell, std::size_t offset, std::uint32_t turn,
                 std::uint32_t next_turn) override;
  void clear(std::uint32_t cell) override;

 private:
  CUdeviceptr address(std::uint32_t cell, std::size_t offset) const;
  void release_all() noexcept;

  const cuda::driver_api& cu_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr base_ = 0;
  std::uint64_t size_ = 0;
  CUstream repairs_ = nullptr;
  unique_fd exported_;
};

signal_page_maker cuda_signal_page_maker(const cuda::driver_api& driver);

}  // namespace gpumem::daemon
