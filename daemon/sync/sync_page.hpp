#pragma once
/// @file
/// @brief One lock and barrier page of the daemon: the host page of one access class, which
/// of its cells hold which object, and the signal pages made for it on devices.
///
/// An access class is what decides who may use an object (open it read-write): its owner uid,
/// and, when its mode lets anyone else use it, its owner gid and whether the group's and the
/// others' bits do. Objects of one class have the same users, so a client that is given the
/// pages of the objects it may use can write no cell of an object it may not use.

#include <sys/types.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "ledger/ledger.hpp"
#include "policy/access_class.hpp"
#include "sync/signal_page.hpp"

namespace gpumem::daemon {

class sync_page {
 public:
  /// @throws std::system_error when the memfd cannot be made or mapped.
  sync_page(std::uint32_t id, access_class tenant);
  /// @brief Re-adoption: the page a previous daemon made, by its kept memfd, words intact.
  /// @throws std::system_error when it cannot be mapped.
  sync_page(std::uint32_t id, access_class tenant, unique_fd memfd);
  sync_page(const sync_page&) = delete;
  sync_page& operator=(const sync_page&) = delete;

  std::uint32_t id() const noexcept { return id_; }
  const access_class& tenant() const noexcept { return tenant_; }
  int fd() const noexcept { return fd_.get(); }
  std::byte* cell(std::uint32_t index) const noexcept;

  /// @return a free cell, zeroed, now @p object's; nullopt when every cell is taken.
  std::optional<std::uint32_t> take_cell(object_id object) noexcept;
  void free_cell(std::uint32_t index) noexcept;
  /// @brief Re-adoption: cell @p index holds @p object, as before the restart.
  /// @return false when the index is out of range or the cell is taken.
  bool restore_cell(std::uint32_t index, object_id object) noexcept;
  /// @return the object in cell @p index, 0 when free or out of range.
  object_id object_in(std::uint32_t index) const noexcept;

  /// Clients attached with this page as their own (attach_sync sent it).
  void attach() noexcept { ++attached_; }
  void detach() noexcept { --attached_; }

  /// @return the signal page made on @p device, nullptr when none was.
  signal_page* signal_page_on(std::int32_t device) const noexcept;
  /// @throws request_error from @p make.
  const signal_page& make_signal_page(std::int32_t device, const signal_page_maker& make);
  void adopt_signal_page(std::int32_t device, std::unique_ptr<signal_page> adopted);
  const std::map<std::int32_t, std::unique_ptr<signal_page>>& signal_pages() const noexcept {
    return signal_pages_;
  }

  /// Whether the page can go. Never once it has a signal page: a repair queued on that page's
  /// stream may not have landed yet (another stream that waits for a client can hold it up),
  /// and unmapping device memory under a pending stream operation faults the daemon's context
  /// on the device; the daemon cannot cancel it. Such a page stays, empty, for its class.
  bool unused() const noexcept {
    return cells_used_ == 0 && attached_ == 0 && signal_pages_.empty();
  }

 private:
  std::uint32_t id_;
  access_class tenant_;
  unique_fd fd_;
  os::mapping mapping_;
  std::vector<object_id> cell_objects_;
  std::uint32_t next_cell_ = 0;
  std::uint32_t cells_used_ = 0;
  unsigned attached_ = 0;
  std::map<std::int32_t, std::unique_ptr<signal_page>> signal_pages_;
};

}  // namespace gpumem::daemon
