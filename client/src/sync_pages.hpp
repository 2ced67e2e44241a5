#pragma once
/// @file
/// @brief One session's view of the lock pages: this client's slot, and the pages its objects
/// are on, each mapped once while objects on it are open.
///
/// Page ids are reused by the daemon once a page is freed, which happens only when no object
/// is left on it. So a page stays in the cache while an object of this session holds it (its
/// cell keeps the daemon's page alive), and an object lets go of its page before it tells the
/// daemon it closes: an id found in the cache always names the page the daemon means.
///
/// A page that streams or kernels used stays mapped until the session ends: work queued on a
/// device may still touch it after its last object closed. The daemon keeps such a page too
/// (it has a signal page), so its id names no other page meanwhile.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "gpumem/shared/unique_fd.hpp"
#include "sync_page.hpp"

namespace gpumem::detail {

class transport;

class sync_pages {
 public:
  /// @brief Asks the daemon for this client's slot and own page, and maps it.
  explicit sync_pages(transport& link);
  sync_pages(const sync_pages&) = delete;
  sync_pages& operator=(const sync_pages&) = delete;

  std::uint16_t slot() const noexcept { return slot_; }
  /// @brief The page @p id: the mapping an open object holds already, else mapped from @p sent
  /// (open_sync's reply carries the page's fd unless it is this client's own), else asked for.
  /// @throws Error(not_found) when the daemon does not let this client use the page.
  std::shared_ptr<sync_page> page(std::uint32_t id, unique_fd sent = {});
  /// @brief Keeps @p used mapped until the session ends: a device uses it.
  void keep_for_devices(const std::shared_ptr<sync_page>& used);

 private:
  transport& link_;
  std::uint16_t slot_ = 0;
  /// Held while attached, as the daemon keeps it for us.
  std::shared_ptr<sync_page> own_page_;
  std::mutex mutex_;
  std::map<std::uint32_t, std::weak_ptr<sync_page>> mapped_;
  std::map<std::uint32_t, std::shared_ptr<sync_page>> used_by_devices_;
};

}  // namespace gpumem::detail
