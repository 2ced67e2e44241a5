#pragma once
/// @file
/// @brief One session with gpumemd as Client and the Buffers it hands out see it.
///
/// client/src holds libgpumem's internals. The public API (client/include/gpumem) is
/// implemented in client.cpp, slab.cpp, reservation.cpp, lock.cpp, barrier.cpp and channel.cpp
/// (c_api.cpp wraps it for C), which reach the daemon through a `connection`. A connection
/// ties together the pieces below it, one file pair each: `transport` (the socket, round
/// trips, the fork check), `import_cache` (the pools and CUDA pointers the session imported;
/// its CUDA side is `cuda_imports`), `host_mapping` (mapping host allocations) and
/// `sync_pages` (the lock pages, which locks, barriers and channels reach through
/// `sync_object`; their CUDA calls are in `cuda_sync`). Dependencies point down only: the
/// pieces include `transport`, never this header. Files here may include the public headers,
/// proto/ and shared/, never daemon/; cuda.h only in the cuda_* files and behind
/// GPUMEM_WITH_CUDA, so that libgpumem builds without the CUDA toolkit.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "gpumem/proto/messages.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "import_cache.hpp"
#include "transport.hpp"

namespace gpumem::detail {

/// @brief The creation flags of a request that may make a named object with @p mode.
/// @throws Error(invalid_argument) for bits beyond rwxrwxrwx.
inline std::uint32_t creation_flags(const Mode& mode) {
  if (!mode) return 0;
  if ((*mode & ~proto::kFlagModeBits) != 0) {
    throw Error(errc::invalid_argument, "mode " + std::to_string(*mode) +
                                            " is not a permission mode (0 to 0777, in octal)");
  }
  return proto::mode_flags(*mode);
}

class sync_pages;

class connection : public std::enable_shared_from_this<connection> {
 public:
  /// @throws Error(io_error) naming the path when nobody answers there.
  static std::shared_ptr<connection> open(const ConnectOptions& options);

  explicit connection(const ConnectOptions& options);
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// @brief One round trip (transport::call).
  template <class Reply, class Request>
  Reply call(proto::message_type type, const Request& request,
             std::vector<unique_fd>* fds = nullptr) {
    return link_.call<Reply>(type, request, fds);
  }

  /// @brief Maps (host) or imports (CUDA) what the daemon granted; a CUDA grant makes
  /// @p stream wait for the allocation.
  Buffer adopt(const proto::allocation_reply& grant, Stream stream);
  /// @brief Unmaps or frees the import after the work on @p last_use, and tells the daemon;
  /// @p buffer is empty afterwards.
  void release(Buffer& buffer, Stream last_use);

  /// The lock pages, attached on first use.
  sync_pages& sync();

  std::uint64_t client_id() const noexcept { return link_.client_id(); }
  bool in_owner_process() const noexcept { return link_.in_owner_process(); }
  pid_t owner_pid() const noexcept { return link_.owner_pid(); }
  std::uint32_t daemon_features() const noexcept { return link_.daemon_features(); }
  /// @brief Client::open_own_objects_only(). @throws Error(not_supported) when the daemon does
  /// not honour proto::kFlagOwnOnly.
  void set_own_objects_only(bool only);
  bool own_objects_only() const noexcept { return own_objects_only_.load(); }
  /// @brief An open by name's flags: proto::kFlagOwnOnly while own_objects_only().
  /// @throws Error(not_supported) then for a daemon without it (one the session resumed on
  /// after a downgrade): it would join another user's object unasked.
  std::uint32_t open_flags() const;
  std::uint64_t greetings() const noexcept { return link_.greetings(); }
  const std::string& path() const noexcept { return link_.path(); }

 private:
  /// Read by every open by name, from any thread.
  std::atomic<bool> own_objects_only_{false};
  transport link_;
  import_cache imports_;
  std::mutex sync_mutex_;
  std::unique_ptr<sync_pages> sync_;
  /// Held from recording a release event until the daemon has seen it (see cuda_imports).
  std::mutex release_mutex_;
};

}  // namespace gpumem::detail
