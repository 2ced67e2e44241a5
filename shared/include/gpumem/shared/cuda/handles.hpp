#pragma once
/// @file
/// @brief Move-only owners of CUDA driver handles, and a scope that makes a context current.
///
/// Every owner keeps the driver table it was made with (a test passes a fake one) and what
/// freeing needs besides the handle (its context, its size, its device). get() reads the
/// handle, release() gives up ownership and returns it, and the destructor frees it: never
/// throwing, ignoring failures, and harmless once the driver has shut down at exit (a call
/// then returns CUDA_ERROR_DEINITIALIZED and does nothing).
///
/// Owners are made by static functions that return the driver's status and fill @p out only
/// on success, so each side reports a failure its own way (the daemon with cuda::check, the
/// client with a gpumem::CudaError) and no handle exists that is not owned.
///
/// Contexts. Streams and events belong to the context they were made in, and die with it; a
/// memory pool is made here with its context current too. Their owners remember that context
/// and destroy inside a scoped_context: a handle whose context is gone must never reach the
/// driver again, and making the context current first is what tells (when it cannot be made
/// current, the handle died with it and nothing is called). The scope puts back whatever the
/// calling thread had current, because the client frees from its users' threads. (The driver
/// itself does not insist: on an H100 with driver 580 every destroy and free below succeeded
/// with no context current at all.) The context is not retained by these owners: declare the
/// primary_context before the streams, events and pools made in it, so that it goes after
/// them. Memory of the virtual memory API (allocation_handle, address_range, mapped_range)
/// and host registrations belong to the process, not to a context, and are freed in whatever
/// context is current.
///
/// Imported memory pools (cuMemPoolImportFromShareableHandle) are destroyed with
/// cuMemPoolDestroy like created ones: the driver names no other call for them and exempts
/// only a device's default pool, NVIDIA's cuda.core frees its imported pools the same way, and
/// on an H100 with driver 580 the call returned CUDA_SUCCESS for an imported pool. Destroying
/// a pool whose allocations (or imported pointers) are still out returns at once; the driver
/// lets go of the pool when the last of them is freed.

#include <cuda.h>

#include <cstddef>
#include <utility>

#include "gpumem/shared/cuda/driver.hpp"

namespace gpumem::cuda {

/// @brief Makes @p context current for one scope, then restores the caller's. Never throws:
/// status() says whether @p context became current; when it did not, nothing changed.
class scoped_context {
 public:
  scoped_context(const driver_api& api, CUcontext context) noexcept;
  ~scoped_context();
  scoped_context(const scoped_context&) = delete;
  scoped_context& operator=(const scoped_context&) = delete;

  CUresult status() const noexcept { return status_; }

 private:
  const driver_api& api_;
  CUcontext previous_ = nullptr;
  CUresult status_ = CUDA_SUCCESS;
  bool changed_ = false;
};

namespace detail {

/// What every owner shares: the table, and @p Held, a raw handle (`handle`, empty when
/// value-initialised) with what its noexcept `free(const driver_api&)` needs.
template <class Held>
class owner {
 public:
  owner() noexcept = default;
  owner(const driver_api& api, const Held& held) noexcept : api_(&api), held_(held) {}
  owner(owner&& other) noexcept : api_(other.api_), held_(std::exchange(other.held_, Held{})) {}
  owner& operator=(owner&& other) noexcept {
    if (this != &other) {
      reset();
      api_ = other.api_;
      held_ = std::exchange(other.held_, Held{});
    }
    return *this;
  }
  owner(const owner&) = delete;
  owner& operator=(const owner&) = delete;
  ~owner() { reset(); }

  auto get() const noexcept { return held_.handle; }
  explicit operator bool() const noexcept { return held_.handle != decltype(held_.handle){}; }
  /// @brief Gives up ownership without freeing: the caller frees what is returned.
  auto release() noexcept { return std::exchange(held_, Held{}).handle; }
  /// @brief Frees now; afterwards the owner is empty.
  void reset() noexcept {
    if (*this) held_.free(*api_);
    held_ = Held{};
  }

 protected:
  const Held& held() const noexcept { return held_; }

 private:
  const driver_api* api_ = nullptr;
  Held held_{};
};

struct held_context {
  CUcontext handle = nullptr;
  CUdevice device = 0;
  void free(const driver_api& api) const noexcept;
};
struct held_stream {
  CUstream handle = nullptr;
  CUcontext context = nullptr;
  void free(const driver_api& api) const noexcept;
};
struct held_event {
  CUevent handle = nullptr;
  CUcontext context = nullptr;
  void free(const driver_api& api) const noexcept;
};
struct held_pool {
  CUmemoryPool handle = nullptr;
  CUcontext context = nullptr;
  void free(const driver_api& api) const noexcept;
};
struct held_allocation {
  CUmemGenericAllocationHandle handle = 0;
  void free(const driver_api& api) const noexcept;
};
struct held_range {
  CUdeviceptr handle = 0;
  std::size_t size = 0;
  void free(const driver_api& api) const noexcept;
};
struct held_mapping {
  CUdeviceptr handle = 0;
  std::size_t size = 0;
  void free(const driver_api& api) const noexcept;
};
struct held_registration {
  void* handle = nullptr;
  void free(const driver_api& api) const noexcept;
};

}  // namespace detail

/// @brief One retain of a device's primary context; released with cuDevicePrimaryCtxRelease.
/// release() returns the context: the caller then owes a release for the device, which it
/// reads with device() before, since release() empties the owner.
class primary_context : public detail::owner<detail::held_context> {
 public:
  primary_context() noexcept = default;
  /// @brief Takes over a retain the caller made.
  primary_context(const driver_api& api, CUdevice device, CUcontext context) noexcept
      : owner(api, {context, device}) {}
  static CUresult retain(const driver_api& api, CUdevice device, primary_context& out) noexcept;

  CUdevice device() const noexcept { return held().device; }
};

/// @brief A stream of @p context, destroyed in it.
class stream : public detail::owner<detail::held_stream> {
 public:
  stream() noexcept = default;
  stream(const driver_api& api, CUstream handle, CUcontext context) noexcept
      : owner(api, {handle, context}) {}
  /// @brief cuStreamCreate with @p context current.
  static CUresult create(const driver_api& api, CUcontext context, unsigned flags,
                         stream& out) noexcept;

  CUcontext context() const noexcept { return held().context; }
};

/// @brief An event of @p context, made here or opened from another process; destroyed in it.
class event : public detail::owner<detail::held_event> {
 public:
  event() noexcept = default;
  event(const driver_api& api, CUevent handle, CUcontext context) noexcept
      : owner(api, {handle, context}) {}
  /// @brief cuEventCreate with @p context current.
  static CUresult create(const driver_api& api, CUcontext context, unsigned flags,
                         event& out) noexcept;
  /// @brief cuIpcOpenEventHandle with @p context current.
  static CUresult open_ipc(const driver_api& api, CUcontext context, const CUipcEventHandle& handle,
                           event& out) noexcept;

  CUcontext context() const noexcept { return held().context; }
};

/// @brief A memory pool made here or imported from another process (see the file comment for
/// why both are destroyed alike).
class memory_pool : public detail::owner<detail::held_pool> {
 public:
  memory_pool() noexcept = default;
  memory_pool(const driver_api& api, CUmemoryPool handle, CUcontext context) noexcept
      : owner(api, {handle, context}) {}
  /// @brief cuMemPoolCreate with @p context current.
  static CUresult create(const driver_api& api, CUcontext context, const CUmemPoolProps& props,
                         memory_pool& out) noexcept;
  /// @brief cuMemPoolImportFromShareableHandle of a POSIX fd, with @p context current. The fd
  /// stays the caller's to close.
  static CUresult import_fd(const driver_api& api, CUcontext context, int fd,
                            memory_pool& out) noexcept;

  CUcontext context() const noexcept { return held().context; }
};

/// @brief A physical allocation of the virtual memory API (cuMemCreate, or imported from a
/// POSIX fd); cuMemRelease drops this handle, and the memory lives on while it is mapped.
class allocation_handle : public detail::owner<detail::held_allocation> {
 public:
  allocation_handle() noexcept = default;
  allocation_handle(const driver_api& api, CUmemGenericAllocationHandle handle) noexcept
      : owner(api, {handle}) {}
  static CUresult create(const driver_api& api, std::size_t size, const CUmemAllocationProp& prop,
                         allocation_handle& out) noexcept;
  /// @brief cuMemImportFromShareableHandle of a POSIX fd; the fd stays the caller's to close.
  static CUresult import_fd(const driver_api& api, int fd, allocation_handle& out) noexcept;
};

/// @brief A range of device addresses (cuMemAddressReserve), freed with cuMemAddressFree.
class address_range : public detail::owner<detail::held_range> {
 public:
  address_range() noexcept = default;
  address_range(const driver_api& api, CUdeviceptr base, std::size_t size) noexcept
      : owner(api, {base, size}) {}
  static CUresult reserve(const driver_api& api, std::size_t size, std::size_t alignment,
                          address_range& out) noexcept;

  std::size_t size() const noexcept { return held().size; }
};

/// @brief An allocation mapped at an address (cuMemMap), unmapped with cuMemUnmap.
class mapped_range : public detail::owner<detail::held_mapping> {
 public:
  mapped_range() noexcept = default;
  mapped_range(const driver_api& api, CUdeviceptr at, std::size_t size) noexcept
      : owner(api, {at, size}) {}
  static CUresult map(const driver_api& api, CUdeviceptr at, std::size_t size,
                      CUmemGenericAllocationHandle allocation, mapped_range& out) noexcept;

  std::size_t size() const noexcept { return held().size; }
};

/// @brief Host memory registered with the driver (cuMemHostRegister), unregistered with
/// cuMemHostUnregister. The memory itself stays the caller's and must outlive this owner.
class host_registration : public detail::owner<detail::held_registration> {
 public:
  host_registration() noexcept = default;
  host_registration(const driver_api& api, void* start) noexcept : owner(api, {start}) {}
  static CUresult register_range(const driver_api& api, void* start, std::size_t size,
                                 unsigned flags, host_registration& out) noexcept;
};

}  // namespace gpumem::cuda
