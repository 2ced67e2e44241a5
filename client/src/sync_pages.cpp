#include "sync_pages.hpp"

#include <vector>

#include "gpumem/shared/sync/layout.hpp"
#include "transport.hpp"

namespace gpumem::detail {

using proto::message_type;

namespace {

void check_geometry(std::size_t fd_count, std::uint32_t cell_size, std::uint32_t cell_count) {
  if (fd_count != 1 || cell_size != sync::kCellSize || cell_count != sync::kCellCount) {
    throw Error(errc::bad_message, "gpumemd's lock page does not match this libgpumem");
  }
}

}  // namespace

sync_pages::sync_pages(transport& link) : link_(link) {
  std::vector<unique_fd> fds;
  const auto reply =
      link_.call<proto::sync_attach_reply>(message_type::attach_sync, proto::empty_payload{}, &fds);
  check_geometry(fds.size(), reply.cell_size, reply.cell_count);
  slot_ = static_cast<std::uint16_t>(reply.slot);
  own_page_ = std::make_shared<sync_page>(link_, reply.page, fds.front().get());
  mapped_.emplace(reply.page, own_page_);
}

std::shared_ptr<sync_page> sync_pages::page(std::uint32_t id, unique_fd sent) {
  std::lock_guard lock(mutex_);
  if (const auto found = mapped_.find(id); found != mapped_.end()) {
    if (auto held = found->second.lock()) return held;
  }
  if (!sent) {
    std::vector<unique_fd> fds;
    const auto reply = link_.call<proto::sync_page_reply>(message_type::get_sync_page,
                                                          proto::sync_page_request{id, 0}, &fds);
    check_geometry(fds.size(), reply.cell_size, reply.cell_count);
    if (reply.page != id) throw Error(errc::bad_message, "gpumemd sent another lock page");
    sent = std::move(fds.front());
  }
  auto made = std::make_shared<sync_page>(link_, id, sent.get());
  std::erase_if(mapped_, [](const auto& each) { return each.second.expired(); });
  mapped_[id] = made;
  return made;
}

void sync_pages::keep_for_devices(const std::shared_ptr<sync_page>& used) {
  std::lock_guard lock(mutex_);
  used_by_devices_.emplace(used->id(), used);
}

}  // namespace gpumem::detail
