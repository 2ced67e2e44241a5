#include "sync_object.hpp"

#include <atomic>
#include <cstddef>

#include "connection.hpp"
#include "gpumem/shared/sync/host_counters.hpp"
#include "wire_names.hpp"

namespace gpumem::detail {

// Kernels (gpumem/device.cuh) tell a dead party's jump from a real count by this distance.
static_assert(sync::kBrokenLead == device::kBrokenLead,
              "the daemon's jump for a dead party's counter is the one kernels expect");

using proto::message_type;

namespace {

/// "lock", "barrier", "channel": in refusals, and before " name" for a refused name.
const char* kind_name(proto::sync_kind kind) noexcept {
  switch (kind) {
    case proto::sync_kind::lock:
      return "lock";
    case proto::sync_kind::barrier:
      return "barrier";
    case proto::sync_kind::channel:
      return "channel";
  }
  return "object";
}

std::string domain_text(std::uint32_t word) {
  switch (sync::domain_of(word)) {
    case sync::domain::host:
      return "on the host";
    case sync::domain::stream:
      return "in stream order on CUDA device " + std::to_string(sync::device_of(word));
    case sync::domain::device:
      return "on CUDA device " + std::to_string(sync::device_of(word));
    case sync::domain::unset:
      break;
  }
  return "nowhere yet";
}

}  // namespace

sync_object::sync_object(std::shared_ptr<connection> link, std::string_view name, Mode mode,
                         proto::sync_kind kind, std::uint32_t parties, proto::sync_role role,
                         std::optional<proto::channel_layout> layout)
    : link_(std::move(link)), slot_(link_->sync().slot()), name_(name), kind_(kind) {
  proto::sync_open_request request{};
  request.name = checked_name(name, std::string(kind_name(kind)) + " name");
  request.kind = kind;
  request.parties = parties;
  request.role = role;
  request.flags = creation_flags(mode) | link_->open_flags();
  if ((link_->daemon_features() & proto::kFeatureSendsSyncPage) != 0) {
    request.flags |= proto::kFlagSendPage;
  }
  std::vector<unique_fd> fds;
  const auto reply =
      layout && (link_->daemon_features() & proto::kFeatureChannelLayout) != 0
          ? link_->call<proto::sync_open_reply>(message_type::open_channel,
                                                proto::channel_open_request{request, *layout}, &fds)
          : link_->call<proto::sync_open_reply>(message_type::open_sync, request, &fds);
  cell_id_ = reply.cell;
  cell_index_ = sync::index_of_cell(reply.cell);
  party_ = reply.party;
  parties_ = reply.parties;
  try {
    if (sync::page_of_cell(reply.cell) != reply.page) {
      throw Error(errc::bad_message, "gpumemd put '" + name_ + "' on a page its cell is not on");
    }
    page_ = link_->sync().page(reply.page, fds.empty() ? unique_fd() : std::move(fds.front()));
  } catch (...) {
    close();
    throw;
  }
}

sync_object::~sync_object() {
  close();
}

void sync_object::check_owner_process() const {
  if (link_->in_owner_process()) return;
  throw Error(errc::invalid_argument,
              std::string(kind_name(kind_)) + " '" + name_ + "' was opened by process " +
                  std::to_string(link_->owner_pid()) +
                  ", which this one was forked from: a forked child must connect its own client "
                  "and open its own");
}

void sync_object::close() noexcept {
  // Let go of the page first: once the daemon has our close, it may free the page and give its
  // id to another, which a cached mapping must not stand for (sync_pages.hpp).
  page_.reset();
  try {
    link_->call<proto::empty_payload>(message_type::close_sync,
                                      proto::sync_close_request{cell_id_, party_});
  } catch (const Error&) {
    // The daemon is gone or the connection broke: it lets go of everything of ours anyway.
  }
}

std::uint32_t& sync_object::domain_word() const noexcept {
  return kind_ == proto::sync_kind::lock ? cell<sync::lock_cell>().domain
                                         : cell<sync::counter_cell>().domain;
}

void sync_object::enter(sync::domain where, int device) {
  const std::uint32_t wanted = sync::domain_word(where, device);
  std::atomic_ref<std::uint32_t> word(domain_word());
  std::uint32_t current = word.load(std::memory_order_acquire);
  if (current == wanted) return;
  if (current == 0 && word.compare_exchange_strong(current, wanted, std::memory_order_acq_rel)) {
    return;
  }
  if (current == wanted) return;
  throw Error(errc::wrong_domain, "'" + name_ + "' is used " + domain_text(current) +
                                      "; it cannot also be used " + domain_text(wanted));
}

std::uint64_t sync_object::signal_word(int device, std::size_t offset) {
  const std::uint64_t address = page_->signal_word(device, cell_index_, offset);
  if (!kept_for_devices_.exchange(true, std::memory_order_relaxed)) {
    link_->sync().keep_for_devices(page_);
  }
  return address;
}

device::counters_ref sync_object::counters_on(int device) {
  enter(sync::domain::device, device);
  return {reinterpret_cast<unsigned int*>(signal_word(device, offsetof(sync::signal_cell, counts))),
          reinterpret_cast<unsigned int*>(signal_word(device, offsetof(sync::signal_cell, broken))),
          parties_, party_};
}

}  // namespace gpumem::detail
