#pragma once
/// @file
/// @brief The client's side of one session: request/reply over the socket and the cache of
/// imported pools. Shared by Client and the Buffers it hands out.

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "gpumem/proto/codec.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::detail {

class cuda_imports;
class sync_pages;

class connection : public std::enable_shared_from_this<connection> {
 public:
  /// @throws Error(io_error) naming the path when nobody answers there.
  static std::shared_ptr<connection> open(const ConnectOptions& options);

  connection(unique_fd socket, std::string path);
  ~connection();

  /// @brief One round trip. Throws Error with the daemon's code and text when it refuses, and
  /// Error(bad_message) or Error(unexpected_handle) when its reply breaks the protocol.
  template <class Reply, class Request>
  Reply call(proto::message_type type, const Request& request,
             std::vector<unique_fd>* fds = nullptr) {
    std::lock_guard lock(mutex_);
    out_.clear();
    proto::append_frame(out_, static_cast<std::uint16_t>(type), ++last_request_id_, request);
    std::vector<unique_fd> received;
    const proto::frame_view frame = exchange(type, received);
    Reply reply{};
    if (auto error = proto::decode_payload(frame.payload, reply)) {
      throw Error(errc::bad_message,
                  std::string("gpumemd sent a malformed reply: ") + error.message());
    }
    if (fds != nullptr) *fds = std::move(received);
    return reply;
  }

  /// @brief Maps (host) or imports (CUDA) what the daemon granted; a CUDA grant makes
  /// @p stream wait for the allocation.
  Buffer adopt(const proto::allocation_reply& grant, Stream stream);
  /// @brief Unmaps or frees the import after the work on @p last_use, and tells the daemon;
  /// @p buffer is empty afterwards.
  void release(Buffer& buffer, Stream last_use);

  /// The lock pages, attached on first use.
  sync_pages& sync();

  std::uint64_t client_id = 0;
  const std::string& path() const noexcept { return path_; }

 private:
  struct imported_pool {
    unique_fd handle;  ///< host pools: kept to map each allocation; CUDA pools: closed at import
    int device;
    bool cuda;
  };

  proto::frame_view exchange(proto::message_type type, std::vector<unique_fd>& fds);
  bool in_owner_process() const noexcept;
  void check_owner_process() const;
  const imported_pool& pool(std::uint32_t pool_id);
  /// The CUDA side of this connection, made on first use; throws when CUDA is unavailable.
  cuda_imports& cuda();
  void* import_device(const proto::allocation_reply& grant, Stream stream);
  void release_device(std::uint64_t id, Stream last_use, proto::release_request& request);

  unique_fd socket_;
  std::string path_;
  pid_t owner_pid_;
  std::uint64_t fork_generation_;
  std::mutex mutex_;
  std::uint32_t last_request_id_ = 0;
  std::vector<std::byte> out_;
  std::vector<std::byte> in_;
  std::mutex pools_mutex_;
  std::unordered_map<std::uint32_t, imported_pool> pools_;
  std::mutex cuda_mutex_;
  std::unique_ptr<cuda_imports> cuda_;
  std::mutex sync_mutex_;
  std::unique_ptr<sync_pages> sync_;
  /// Held from recording a release event until the daemon has seen it (see cuda_imports).
  std::mutex release_mutex_;
};

}  // namespace gpumem::detail
