#pragma once
/// @file
/// @brief The daemon's books of locks, barriers and channels: names to cells of the host page,
/// client slots, barrier parties, and the cleanup after a client's process died. Clients
/// change the cells themselves; the daemon only hands out cells and repairs after deaths.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumem/proto/messages.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "sync/signal_page.hpp"

namespace gpumem::daemon {

class sync_registry {
 public:
  /// @param make_signal_page empty when there is no CUDA: stream and device forms are refused.
  explicit sync_registry(signal_page_maker make_signal_page = {});
  ~sync_registry();
  sync_registry(const sync_registry&) = delete;
  sync_registry& operator=(const sync_registry&) = delete;

  /// @return the client's slot, the same on every call.
  /// @throws request_error(out_of_memory) when every slot is taken.
  std::uint16_t attach(std::uint64_t client, pid_t pid);
  int host_page_fd() const noexcept { return page_fd_.get(); }
  /// @throws request_error: permission_denied before attach, invalid_argument for a party
  /// count that differs from the existing object's, no_party_left, out_of_memory.
  proto::sync_open_reply open(std::uint64_t client, const proto::sync_open_request& request);
  void close(std::uint64_t client, const proto::sync_close_request& request);
  /// @throws request_error(not_found), not_supported for a stream-ordered lock.
  void reset(const proto::sync_reset_request& request);
  proto::sync_list_reply list(std::uint64_t after_id) const;
  /// @throws request_error(not_supported) without CUDA, no_such_device.
  const signal_page& signal_page_of(std::int32_t device);

  /// @brief The client's process is gone: hands its locks on (owner died), breaks its
  /// barriers and channels, and lets go of what it opened.
  void drop_client(std::uint64_t client) noexcept;
  /// @brief Finishes clean-ups that found a hand-off in flight.
  /// @return true when none is left.
  bool settle() noexcept;
  bool holds_anything(std::uint64_t client) const noexcept;

 private:
  struct object {
    std::uint64_t id;
    std::string name;
    proto::sync_kind kind;
    std::uint32_t cell;
    std::uint32_t parties = 0;
    std::map<std::uint64_t, std::uint32_t> openers;  ///< client -> handles
    std::vector<std::uint64_t> party_clients;        ///< party -> client; 0 when free
  };
  struct attached_client {
    std::uint16_t slot;
    pid_t pid;
  };
  struct pending_reclaim {
    std::uint16_t slot;
    std::uint64_t object_id;
  };

  template <class Cell>
  Cell& cell_as(std::uint32_t cell) const noexcept {
    return *reinterpret_cast<Cell*>(page_ + cell * sync::kCellSize);
  }
  std::uint32_t take_cell();
  std::uint32_t take_party(object& found, std::uint64_t client, proto::sync_role role);
  /// @return false while a hand-off is in flight.
  bool reclaim(object& found, std::uint16_t dead_slot, std::uint64_t dead_client) noexcept;
  bool reclaim_stream_lock(object& found, std::uint16_t dead_slot);
  void reclaim_device_lock(object& found, std::uint16_t dead_slot);
  /// Breaks a barrier or channel whose @p party died or left.
  void break_party(object& found, std::uint32_t party);
  signal_page* gpu_page_of(const object& found);
  void forget_if_unused(std::uint64_t object_id) noexcept;
  pid_t pid_of_slot(std::uint16_t slot) const noexcept;

  signal_page_maker make_signal_page_;
  std::map<std::int32_t, std::unique_ptr<signal_page>> signal_pages_;
  unique_fd page_fd_;
  std::byte* page_ = nullptr;
  std::map<std::uint64_t, object> objects_;
  std::unordered_map<std::string, std::uint64_t> names_;
  std::vector<bool> cell_taken_ = std::vector<bool>(sync::kCellCount, false);
  std::uint32_t next_cell_ = 0;
  std::map<std::uint64_t, attached_client> clients_;
  std::vector<bool> slot_taken_ = std::vector<bool>(sync::kMaxSlots + 1, false);
  std::vector<pending_reclaim> pending_;
  std::uint64_t next_object_id_ = 1;
};

}  // namespace gpumem::daemon
