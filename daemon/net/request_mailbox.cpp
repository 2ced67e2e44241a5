#include "net/request_mailbox.hpp"

#include <sys/eventfd.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "gpumem/shared/os/memfd.hpp"
#include "gpumem/shared/sync/futex.hpp"

namespace gpumem::daemon {

using proto::mailbox_word;

request_mailbox::request_mailbox()
    : memory_(os::make_sealed_memfd("gpumemd:mailbox", proto::kMailboxBytes)),
      doorbell_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!doorbell_) throw std::system_error(errno, std::system_category(), "eventfd");
  mapping_ = os::mapping::share(memory_.get(), proto::kMailboxBytes, os::access::read_write);
}

request_mailbox::~request_mailbox() {
  // Pages the daemon touched (the reply slot, above all) are charged to it for as long as the
  // memfd lives, and the client may keep it after the connection ends: punch them out.
  (void)::madvise(mapping_.get(), proto::kMailboxBytes, MADV_REMOVE);
}

request_mailbox::taken request_mailbox::take(std::vector<std::byte>& into) {
  proto::mailbox_layout& box = layout();
  const std::uint32_t seq = mailbox_word(box.request_seq).load(std::memory_order_acquire);
  if (seq == taken_seq_) return taken::none;
  taken_seq_ = seq;
  const std::uint32_t size = mailbox_word(box.request_size).load(std::memory_order_relaxed);
  if (size > proto::kMaxFrameSize) {
    into.clear();
    return taken::oversized;
  }
  into.assign(box.request, box.request + size);
  return taken::request;
}

// One sleeper is woken: a connection's calls come one at a time, so its client has one waiter
// on the word, and a client that parked many there would otherwise make each wake cost the
// loop as many.
void request_mailbox::mark_answering() noexcept {
  proto::mailbox_layout& box = layout();
  mailbox_word(box.reply_seq).store(proto::answering_mark(taken_seq_), std::memory_order_release);
  sync::futex_wake(&box.reply_seq, 1);
}

void request_mailbox::answer(std::span<const std::byte> reply) noexcept {
  proto::mailbox_layout& box = layout();
  std::memcpy(box.reply, reply.data(), reply.size());
  mailbox_word(box.reply_size)
      .store(static_cast<std::uint32_t>(reply.size()), std::memory_order_relaxed);
  mailbox_word(box.reply_seq).store(taken_seq_, std::memory_order_release);
  sync::futex_wake(&box.reply_seq, 1);
}

bool request_mailbox::has_request() const noexcept {
  return mailbox_word(layout().request_seq).load(std::memory_order_acquire) != taken_seq_;
}

bool request_mailbox::client_closed_cleanly() const noexcept {
  return mailbox_word(layout().closing).load(std::memory_order_acquire) == proto::kClosingCleanly;
}

}  // namespace gpumem::daemon
