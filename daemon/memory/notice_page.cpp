#include "memory/notice_page.hpp"

#include <atomic>

#include "gpumem/shared/os/memfd.hpp"
#include "gpumem/shared/sync/futex.hpp"

namespace gpumem::daemon {

notice_page::notice_page()
    : notice_page(os::make_sealed_memfd("gpumemd:notice", kReservationNoticeBytes)) {}

notice_page::notice_page(unique_fd kept)
    : memory_(std::move(kept)),
      read_only_(os::reopen_read_only(memory_.get())),
      mapped_(os::mapping::share(memory_.get(), kReservationNoticeBytes, os::access::read_write)) {}

reservation_notice& notice_page::words() const noexcept {
  return *static_cast<reservation_notice*>(mapped_.get());
}

void notice_page::publish(proto::reservation_state state, std::uint64_t version) noexcept {
  reservation_notice& notice = words();
  std::atomic_ref<std::uint32_t>(notice.state)
      .store(static_cast<std::uint32_t>(state), std::memory_order_relaxed);
  std::atomic_ref<std::uint64_t>(notice.version).store(version, std::memory_order_relaxed);
  std::atomic_ref<std::uint32_t>(notice.generation).fetch_add(1, std::memory_order_release);
  sync::futex_wake(&notice.generation);
}

std::uint32_t notice_page::generation() const noexcept {
  return notice_generation(words());
}

}  // namespace gpumem::daemon
