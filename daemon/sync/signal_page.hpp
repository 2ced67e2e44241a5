#pragma once
/// @file
/// @brief A device's signal page as the daemon holds it: the device memory whose words
/// stream-ordered locks, GPU barriers and kernels wait on, exported to every client once. The
/// daemon touches its words (sync::signal_words) only to clean up after a death or a reset.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "gpumem/shared/sync/signal_words.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::daemon {

class signal_page : public sync::signal_words {
 public:
  /// Told of each turn given to pass_turn() that waits no more: its pass was seen landed, or
  /// its word was found past it. Called on the daemon's loop; must not throw.
  using passed_turn_sink = std::function<void(std::uint32_t cell, std::uint32_t turn)>;

  virtual int fd() const noexcept = 0;  ///< the chunk's shareable handle, owned by the page
  virtual std::uint64_t size() const noexcept = 0;
  /// @brief Passes on the turns given to pass_turn() that have come since, without waiting for
  /// the GPU; the daemon's loop calls it now and then. A turn waits until the write that passes
  /// it on has landed, or until its word is found past it, and is then told to @p passed. One
  /// whose word could not be read or written is logged and stays waiting.
  /// @return whether any is still waiting.
  virtual bool pass_arrived_turns(const passed_turn_sink& passed) noexcept = 0;
  virtual std::size_t waiting_turn_count() const noexcept = 0;
};

/// Makes the signal page of @p device; throws request_error.
using signal_page_maker = std::function<std::unique_ptr<signal_page>(std::int32_t device)>;
/// Re-adoption: the signal page of @p device that a previous daemon made, from its kept fd.
using signal_page_adopter =
    std::function<std::unique_ptr<signal_page>(std::int32_t device, unique_fd exported)>;

}  // namespace gpumem::daemon
