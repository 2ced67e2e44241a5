#include "chunk_mapping.hpp"

#include <string>

#include "connection.hpp"

namespace gpumem::detail {

namespace {
/// One pass over the pages; false when a later page's version is no longer current.
bool read_pages(connection& session, std::uint64_t reservation_id, proto::chunk_set which,
                chunk_listing& listing) {
  for (bool more = true; more;) {
    const auto first = static_cast<std::uint32_t>(listing.ids.size());
    const std::uint64_t version = first == 0 ? 0 : listing.head.version;
    std::vector<unique_fd> fds;
    proto::chunks_reply page;
    try {
      page = session.call<proto::chunks_reply>(
          proto::message_type::get_chunks,
          proto::chunks_request{reservation_id, first, which, version}, &fds);
    } catch (const Error& error) {
      if (first != 0 && error.status() == errc::wrong_state) return false;
      throw;
    }
    if (fds.size() != page.records.size()) {
      throw Error(errc::unexpected_handle, "gpumemd sent a chunk without its descriptor");
    }
    if (first == 0) listing.head = page.head;
    for (std::size_t i = 0; i < page.records.size(); ++i) {
      if (page.records[i].index != listing.ids.size()) {
        throw Error(errc::bad_message, "gpumemd sent chunk " +
                                           std::to_string(page.records[i].index) + " in place of " +
                                           std::to_string(listing.ids.size()));
      }
      listing.ids.push_back(page.records[i].chunk_id);
      listing.fds.push_back(std::move(fds[i]));
    }
    more = page.head.more != 0 && !page.records.empty();
  }
  return true;
}
}  // namespace

chunk_listing list_chunks(connection& session, std::uint64_t reservation_id,
                          proto::chunk_set which) {
  for (;;) {
    chunk_listing listing;
    if (!read_pages(session, reservation_id, which, listing)) continue;
    if (!listing.ids.empty() && listing.ids.size() != listing.head.committed_chunks) {
      throw Error(errc::bad_message,
                  "gpumemd listed " + std::to_string(listing.ids.size()) + " chunks of " +
                      std::to_string(listing.head.committed_chunks) + " committed");
    }
    return listing;
  }
}

chunk_mapping::chunk_mapping(std::unique_ptr<range_mapper> range, std::size_t capacity)
    : range_(std::move(range)), capacity_(capacity) {}

void chunk_mapping::apply(const chunk_listing& listing, Access access) {
  if (listing.ids.size() > capacity_) {
    throw Error(errc::bad_message, "gpumemd listed " + std::to_string(listing.ids.size()) +
                                       " chunks for a range of " + std::to_string(capacity_));
  }
  std::size_t same = 0;
  if (access == access_) {
    while (same < ids_.size() && same < listing.ids.size() && ids_[same] == listing.ids[same]) {
      ++same;
    }
  }
  unmap_from(same);
  access_ = access;
  for (std::size_t index = same; index < listing.ids.size(); ++index) {
    range_->map(index, listing.fds[index].get(), access);
    ids_.push_back(listing.ids[index]);
  }
}

void chunk_mapping::clear() {
  unmap_from(0);
}

void chunk_mapping::unmap_from(std::size_t index) {
  // From the end, so that what stays counted is always what is mapped.
  while (ids_.size() > index) {
    range_->unmap(ids_.size() - 1);
    ids_.pop_back();
  }
}

}  // namespace gpumem::detail
