#pragma once
/// @file
/// @brief Host memory the daemon owns that holds a sleeping reservation's bytes: a memfd, so that
/// it can be kept in systemd's fd store across a restart, mapped in the daemon, and pinned for a
/// device's copies by the first copy that needs it.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::daemon {

/// What keeps a copy's pages pinned for a device (cuMemHostRegister): made by the backend that
/// pinned them, which alone knows how to let go.
class host_pinning {
 public:
  virtual ~host_pinning() = default;
};

struct sleep_copy {
  unique_fd memory;
  os::mapping mapped;
  std::uint64_t bytes = 0;
  /// The reservation's sleep attempt that made it, which names it in systemd's fd store for as
  /// long as it lives: a copy a later sleep reuses keeps its name, so the store, which drops a
  /// file it holds already, never sees it under a second name that a removal of the first
  /// would leave with nothing.
  std::uint64_t made_at_attempt = 0;
  /// Set by the first device copy and kept with the pages: pinning costs about 50 ms a GiB, as
  /// long as copying 2.5 GiB. Declared after `mapped`, so that it is undone before the unmapping.
  std::unique_ptr<host_pinning> pinned;

  sleep_copy() = default;
  sleep_copy(sleep_copy&&) noexcept = default;
  /// Unpins what it held before unmapping it: member by member, `mapped` would go first.
  sleep_copy& operator=(sleep_copy&& other) noexcept {
    pinned.reset();
    memory = std::move(other.memory);
    mapped = std::move(other.mapped);
    bytes = other.bytes;
    made_at_attempt = other.made_at_attempt;
    pinned = std::move(other.pinned);
    return *this;
  }
  ~sleep_copy() = default;  // members in reverse: unpinned, unmapped, closed

  std::byte* data() const noexcept { return static_cast<std::byte*>(mapped.get()); }

  /// @brief A memfd of @p bytes, mapped, its pages made resident by several threads at once:
  /// a copy into fresh pages runs at the speed the kernel can hand them out.
  /// @throws std::system_error
  static sleep_copy make(std::uint64_t bytes, std::uint64_t made_at_attempt);
  /// @throws std::system_error
  static sleep_copy adopt(unique_fd memory, std::uint64_t made_at_attempt);
};

}  // namespace gpumem::daemon
