#pragma once
/// @file
/// @brief What every lock, barrier and channel handle holds: its page and cell, its party, and
/// the rule that fixes the domain it is used in. Closing it tells the daemon.

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "gpumem/device_refs.hpp"
#include "gpumem/gpumem.hpp"
#include "gpumem/proto/messages.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "sync_pages.hpp"

namespace gpumem::detail {

class connection;

/// @brief Before every use of a lock, barrier or channel handle: its state @p state (which
/// holds its sync_object as `object`) is there, and this is the process that opened it.
/// @throws Error(invalid_argument) for a handle moved from, and in a forked child: the
/// child's copy shares the parent's party and lock owner bits, so its use would pass for the
/// parent's (a lock held by nobody the daemon can see die, a barrier's arrival counted twice).
template <class State>
void check_usable(const State* state, const char* type) {
  if (state == nullptr)
    throw Error(errc::invalid_argument, std::string("the ") + type + " is empty (moved from)");
  state->object.check_owner_process();
}

class sync_object {
 public:
  /// @throws Error from the daemon: invalid_name, invalid_argument, no_party_left,
  /// wrong_state (a broken barrier or channel), ...
  /// @param mode of the object when this call creates it.
  /// @param layout a channel's slots, which the daemon checks against the channel's first
  /// opener's when it can (proto::kFeatureChannelLayout); none for locks and barriers.
  sync_object(std::shared_ptr<connection> link, std::string_view name, Mode mode,
              proto::sync_kind kind, std::uint32_t parties, proto::sync_role role,
              std::optional<proto::channel_layout> layout = std::nullopt);
  ~sync_object();
  sync_object(const sync_object&) = delete;
  sync_object& operator=(const sync_object&) = delete;

  template <class Cell>
  Cell& cell() const noexcept {
    return *reinterpret_cast<Cell*>(page_->cell(cell_index_));
  }
  /// @throws Error(invalid_argument) in a child forked after the object was opened.
  void check_owner_process() const;
  /// @brief Fixes the domain on first use.
  /// @throws Error(wrong_domain) when the object is used in another domain (or device).
  void enter(sync::domain where, int device = 0);
  /// @brief A word of the object's signal cell on @p device; its page stays mapped from now on
  /// (sync_pages.hpp).
  std::uint64_t signal_word(int device, std::size_t offset);
  /// @brief The counters as kernels use them; fixes the GPU domain.
  device::counters_ref counters_on(int device);

  sync_page& page() const noexcept { return *page_; }
  std::uint16_t slot() const noexcept { return slot_; }
  std::uint32_t party() const noexcept { return party_; }
  std::uint32_t parties() const noexcept { return parties_; }
  const std::string& name() const noexcept { return name_; }

 private:
  std::uint32_t& domain_word() const noexcept;
  void close() noexcept;

  std::shared_ptr<connection> link_;
  std::uint16_t slot_;
  std::string name_;
  proto::sync_kind kind_;
  std::shared_ptr<sync_page> page_;
  std::uint32_t cell_id_ = 0;  ///< across pages, as the daemon names it
  std::uint32_t cell_index_ = 0;
  std::atomic<bool> kept_for_devices_{false};
  std::uint32_t party_ = 0;
  std::uint32_t parties_ = 0;
};

}  // namespace gpumem::detail
