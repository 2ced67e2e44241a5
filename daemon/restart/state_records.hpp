#pragma once
/// @file
/// @brief The daemon's state as records (daemon/restart/journal.hpp): one per client, object,
/// pool instance and lock page, plus one of counters ("meta"), each written from the books as
/// they are and read back into plain data for re-adoption. Descriptors are not in records:
/// they are kept in systemd's fd store under the names made here.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "books.hpp"
#include "restart/journal.hpp"

namespace gpumem::daemon::restart {

struct saved_meta {
  std::uint64_t instance = 0;
  object_id next_object = 1;
  client_id next_client = 1;
  std::uint32_t next_pool = 0;
  std::uint64_t next_chunk = 1;
  std::vector<sync_book::saved_reclaim> pending;
  /// The event stream's last number (0 in state written before it was kept).
  std::uint64_t event_sequence = 0;
};
struct saved_client {
  client_row row;
  std::optional<sync_book::saved_attachment> attachment;
};
struct saved_allocation {
  std::uint32_t pool = 0;
  placement where;
  grant_details grant;
};
struct saved_reservation {
  enum class phase : std::uint8_t { awake, asleep, lost };
  struct version_chunks {
    std::uint64_t version = 0;
    std::vector<std::uint64_t> chunks;  ///< ids, in order
  };
  std::int32_t device = 0;
  std::uint64_t max_size = 0;
  std::uint64_t chunk_size = 0;
  version_chunks current;  ///< no chunks while asleep
  std::uint64_t committed = 0;
  phase state = phase::awake;
  std::vector<version_chunks> older;
  std::optional<version_chunks> draft;
  client_id draft_writer = 0;
  std::map<client_id, std::uint64_t> mapped;
  std::vector<client_id> writers;
  /// The notice page and the sleep copy are in the fd store (a record of the first format, from
  /// before versions, has neither: the notice page is made anew).
  bool notice_kept = false;
  std::optional<std::uint64_t> sleep_copy;  ///< the sleep attempt that made the copy: its fd name
  std::uint64_t attempt = 0;
};
struct saved_object {
  object_row row;
  std::optional<saved_allocation> allocation;
  std::optional<saved_reservation> reservation;
  std::optional<sync_book::saved_cell> cell;
};
struct saved_pool {
  pool_config config;
  access_class tenant;
};
struct saved_page {
  access_class tenant;
  std::vector<std::int32_t> signal_devices;
};
struct state_image {
  saved_meta meta;
  std::map<client_id, saved_client> clients;
  std::map<object_id, saved_object> objects;
  std::map<std::uint32_t, saved_pool> pools;
  std::map<std::uint32_t, saved_page> pages;
};

/// @brief Puts the record of @p key as the books hold it now into @p out.
/// @return false, putting nothing, when it is gone.
bool encode(const books& state, record_key key, record_writer& out);
/// @throws format_error for a record that does not decode.
state_image decode(const record_map& records);

/// Names of the descriptors in systemd's fd store.
std::string pool_fd_name(std::uint32_t pool_id);
std::string chunk_fd_name(std::uint64_t chunk_id);
std::string page_fd_name(std::uint32_t page_id);
std::string signal_fd_name(std::uint32_t page_id, std::int32_t device);
std::string client_fd_name(client_id client);
std::string notice_fd_name(object_id reservation);
std::string sleep_copy_fd_name(object_id reservation, std::uint64_t attempt);

/// @brief The descriptors the books hold for @p key (not clients': their pidfds are the
/// store's), by fd-store name.
std::vector<std::pair<std::string, int>> descriptors_of(const books& state, record_key key);

}  // namespace gpumem::daemon::restart
