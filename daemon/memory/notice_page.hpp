#pragma once
/// @file
/// @brief The daemon's side of a reservation's notice page (gpumem/shared/reservation_notice.hpp):
/// a memfd it maps writable and hands to holders read-only.

#include <cstdint>

#include "gpumem/proto/messages.hpp"
#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/reservation_notice.hpp"
#include "gpumem/shared/unique_fd.hpp"

namespace gpumem::daemon {

class notice_page {
 public:
  /// @throws std::system_error
  notice_page();
  /// @brief Re-adoption: the page a previous daemon made; holders still map it.
  explicit notice_page(unique_fd kept);

  /// @brief Writes the state and version, bumps the generation and wakes every waiter.
  void publish(proto::reservation_state state, std::uint64_t version) noexcept;
  std::uint32_t generation() const noexcept;

  int fd() const noexcept { return memory_.get(); }
  int read_only_fd() const noexcept { return read_only_.get(); }

 private:
  reservation_notice& words() const noexcept;

  unique_fd memory_;
  unique_fd read_only_;
  os::mapping mapped_;
};

}  // namespace gpumem::daemon
