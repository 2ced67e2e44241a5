#include "restart/snapshot_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <vector>

#include "gpumem/shared/os/memfd.hpp"
#include "restart/journal.hpp"

namespace gpumem::daemon::restart {

namespace {

void write_at(int fd, std::span<const std::byte> bytes, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) throw std::system_error(errno, std::system_category(), "writing the state");
    done += static_cast<std::size_t>(wrote);
  }
}

/// A record as a replay met it: its bytes stay in the mapped file they were read from.
struct replayed_record {
  record_key key;
  std::span<const std::byte> body;
  bool present;
};

}  // namespace

snapshot_file seal_snapshot(std::uint64_t generation, std::span<const std::byte> batch) {
  snapshot_file made{os::make_empty_memfd("gpumemd-state")};
  // The header and the batch written apart: a copy of the batch behind the header was a tenth
  // of a fold with 10,000 objects.
  const std::vector<std::byte> header = file_header(file_kind::snapshot, generation);
  write_at(made.fd.get(), header, 0);
  write_at(made.fd.get(), batch, header.size());
  made.size = header.size() + batch.size();
  // Sealed: nothing, not even this daemon by mistake, changes a snapshot once stored.
  if (::fcntl(made.fd.get(), F_ADD_SEALS,
              F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    throw std::system_error(errno, std::system_category(), "sealing the state snapshot");
  }
  return made;
}

snapshot_file fold_snapshot(int snapshot_fd, std::uint64_t generation,
                            std::span<const std::byte> journal) {
  const os::mapping snapshot = map_state_file(snapshot_fd);
  // Every record the two files hold, in one list sorted once: no node per record, as a map of
  // them would make.
  std::vector<replayed_record> records;
  const auto collect = [&records](record_key key, std::optional<std::span<const std::byte>> body) {
    records.push_back({key, body.value_or(std::span<const std::byte>{}), body.has_value()});
  };
  replay(mapped_bytes(snapshot), file_kind::snapshot, generation, collect);
  replay(journal, file_kind::journal, generation, collect);
  // Stable: a key's records keep the order they were written in, and the last one is the record.
  std::stable_sort(
      records.begin(), records.end(),
      [](const replayed_record& a, const replayed_record& b) { return a.key < b.key; });
  batch_builder folded;
  for (auto each = records.begin(); each != records.end(); ++each) {
    const auto next = std::next(each);
    if ((next != records.end() && next->key == each->key) || !each->present) continue;
    folded.begin_record(each->key).append(each->body);
    folded.end_record(true);
  }
  return seal_snapshot(generation + 1, std::move(folded).take());
}

os::mapping map_state_file(int fd) {
  const std::uint64_t size = os::file_size(fd);
  if (size == 0) return {};
  std::error_code error;
  os::mapping mapped = os::mapping::share(fd, size, os::access::read_only, 0, error);
  if (error) throw format_error("a state file cannot be mapped: " + error.message());
  return mapped;
}

}  // namespace gpumem::daemon::restart
