#include "request_mailbox.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "gpumem/gpumem.hpp"
#include "gpumem/shared/os/memfd.hpp"
#include "gpumem/shared/sync/futex.hpp"

namespace gpumem::detail {

using proto::mailbox_word;

namespace {
os::mapping map_mailbox(int memory) {
  try {
    if (os::file_size(memory) < proto::kMailboxBytes) {
      throw Error(errc::bad_message, "gpumemd sent a request mailbox smaller than its layout");
    }
    return os::mapping::share(memory, proto::kMailboxBytes, os::access::read_write);
  } catch (const std::system_error& error) {
    throw Error(errc::io_error, std::string("mapping the request mailbox: ") + error.what());
  }
}
}  // namespace

request_mailbox::request_mailbox(unique_fd memory, unique_fd doorbell)
    : doorbell_(std::move(doorbell)), mapping_(map_mailbox(memory.get())) {}

void request_mailbox::post(std::span<const std::byte> request) {
  proto::mailbox_layout& box = layout();
  std::memcpy(box.request, request.data(), request.size());
  mailbox_word(box.request_size)
      .store(static_cast<std::uint32_t>(request.size()), std::memory_order_relaxed);
  answering_since_.reset();
  mailbox_word(box.request_seq).store(++posted_seq_, std::memory_order_release);
  ring();
}

void request_mailbox::ring() {
  const std::uint64_t one = 1;
  for (;;) {
    if (::write(doorbell_.get(), &one, sizeof one) == sizeof one) return;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      // The counter is full (the daemon never reads it): empty it, and ring again.
      std::uint64_t count = 0;
      if (::read(doorbell_.get(), &count, sizeof count) == sizeof count || errno == EAGAIN) {
        continue;
      }
    }
    throw Error(errc::io_error,
                "ringing gpumemd's request mailbox: " + std::system_category().message(errno));
  }
}

std::optional<std::size_t> request_mailbox::take_answer(std::span<std::byte> into) const {
  proto::mailbox_layout& box = layout();
  if (mailbox_word(box.reply_seq).load(std::memory_order_acquire) != posted_seq_) {
    return std::nullopt;
  }
  const std::size_t size = mailbox_word(box.reply_size).load(std::memory_order_relaxed);
  if (size > into.size()) {
    throw Error(errc::bad_message,
                "gpumemd's answer in the request mailbox is larger than a frame");
  }
  std::memcpy(into.data(), box.reply, size);
  return size;
}

bool request_mailbox::answering() const noexcept {
  return mailbox_word(layout().reply_seq).load(std::memory_order_relaxed) ==
         proto::answering_mark(posted_seq_);
}

bool request_mailbox::sleep(std::chrono::nanoseconds longest) noexcept {
  using clock = std::chrono::steady_clock;
  auto word = mailbox_word(layout().reply_seq);
  const std::uint32_t seen = word.load(std::memory_order_acquire);
  if (seen == posted_seq_) return false;
  const auto start = clock::now();
  if (seen == proto::answering_mark(posted_seq_)) {
    if (!answering_since_) answering_since_ = start;
    const auto until = std::min(*answering_since_ + kSpinWhileAnswering, start + longest);
    for (unsigned turns = 0; clock::now() < until; ++turns) {
      if (word.load(std::memory_order_relaxed) != seen) return false;
      sync::spin_turn(turns);
    }
  }
  const auto left = longest - (clock::now() - start);
  if (left <= clock::duration::zero()) return false;
  sync::futex_wait(&layout().reply_seq, seen, left);
  return true;
}

std::uint32_t request_mailbox::unanswered_value() const noexcept {
  const std::uint32_t seen = mailbox_word(layout().reply_seq).load(std::memory_order_relaxed);
  return seen == posted_seq_ ? posted_seq_ - 1 : seen;
}

void request_mailbox::say_closing() noexcept {
  mailbox_word(layout().closing).store(proto::kClosingCleanly, std::memory_order_release);
}

}  // namespace gpumem::detail
