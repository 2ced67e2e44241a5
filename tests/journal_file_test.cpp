// The journal memfd the daemon appends to through a mapping (daemon/restart/journal_file.hpp):
// what it appends reads back through the file as a journal, a batch without room is refused
// whole, and a journal adopted from an earlier daemon goes on after its last batch.
#include "restart/journal_file.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "gpumem/shared/os/memfd.hpp"
#include "restart/journal.hpp"
#include "support/state_batches.hpp"

namespace gpumem::daemon::restart {
namespace {

using testing::record_change;

constexpr std::uint64_t kGeneration = 5;

std::vector<std::byte> batch_of(std::uint64_t id, std::size_t bytes) {
  return testing::batch_of(
      std::vector<record_change>{{{record_type::object, id}, std::vector<std::byte>(bytes)}});
}

/// The whole file, as a restarted daemon reads it.
std::vector<std::byte> file_bytes(int fd) {
  std::vector<std::byte> bytes(os::file_size(fd));
  EXPECT_EQ(::pread(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  return bytes;
}

replay_result replayed(int fd, record_map& state) {
  return replay(file_bytes(fd), file_kind::journal, kGeneration, state);
}

const std::uint64_t kPage = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));

TEST(JournalFile, AppendsReadBackThroughTheFileAsAJournalWithAZeroTail) {
  journal_file journal = journal_file::create(kGeneration, 2 * kPage);
  const std::uint64_t header = journal.size();
  EXPECT_EQ(header, file_header(file_kind::journal, kGeneration).size());
  for (std::uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(journal.append(batch_of(id, 100)));
  EXPECT_EQ(os::file_size(journal.fd()), 2 * kPage);
  struct stat status {};
  ASSERT_EQ(::fstat(journal.fd(), &status), 0);
  EXPECT_GE(static_cast<std::uint64_t>(status.st_blocks) * 512, 2 * kPage)
      << "the memory ahead of the appends is taken before they need it";
  record_map state;
  const replay_result result = replayed(journal.fd(), state);
  EXPECT_EQ(result.batches, 3u);
  EXPECT_FALSE(result.torn_tail);
  EXPECT_EQ(result.end, journal.size());
  EXPECT_EQ(state.size(), 3u);
}

TEST(JournalFile, ABatchWithoutRoomIsRefusedAndNothingOfItWritten) {
  journal_file journal = journal_file::create(kGeneration, kPage);
  ASSERT_TRUE(journal.append(batch_of(1, 1000)));
  const std::uint64_t before = journal.size();
  EXPECT_FALSE(journal.append(batch_of(2, kPage)));
  EXPECT_EQ(journal.size(), before);
  record_map state;
  const replay_result result = replayed(journal.fd(), state);
  EXPECT_EQ(result.batches, 1u);
  EXPECT_FALSE(result.torn_tail);
  // Up to the last byte of room: a batch that fills it exactly fits.
  const std::uint64_t left = kPage - journal.size();
  const std::size_t framing = batch_of(3, 0).size();
  EXPECT_TRUE(journal.append(batch_of(3, left - framing)));
  EXPECT_EQ(journal.size(), kPage);
  EXPECT_FALSE(journal.append(batch_of(4, 0)));
}

TEST(JournalFile, AnAdoptedJournalGoesOnAfterItsLastBatchAndGrowsToItsRoom) {
  journal_file first = journal_file::create(kGeneration, kPage);
  ASSERT_TRUE(first.append(batch_of(1, 100)));
  const unique_fd kept(::dup(first.fd()));  // as systemd's fd store keeps it
  const std::uint64_t end = first.size();
  first = journal_file();  // the daemon that wrote it is gone

  journal_file adopted = journal_file::adopt(unique_fd(::dup(kept.get())), end, 4 * kPage);
  EXPECT_EQ(adopted.size(), end);
  EXPECT_EQ(os::file_size(kept.get()), 4 * kPage);
  ASSERT_TRUE(adopted.append(batch_of(2, 2 * kPage)));
  record_map state;
  const replay_result result = replayed(kept.get(), state);
  EXPECT_EQ(result.batches, 2u);
  EXPECT_FALSE(result.torn_tail);
  EXPECT_EQ(state.size(), 2u);

  // A file larger than the room asked for keeps its size, and its room.
  journal_file again = journal_file::adopt(unique_fd(::dup(kept.get())), adopted.size(), kPage);
  EXPECT_EQ(os::file_size(kept.get()), 4 * kPage);
  EXPECT_TRUE(again.append(batch_of(3, 100)));
}

// The journal of a daemon before this one was written with pwrite: as large as its batches, with
// no zeroes after them, and sealed against shrinking only. An upgraded daemon goes on with it.
TEST(JournalFile, AJournalWrittenToItsSizeIsAdoptedAndGrown) {
  unique_fd old(::memfd_create("old-journal", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(old);
  std::vector<std::byte> bytes = file_header(file_kind::journal, kGeneration);
  const std::vector<std::byte> first = batch_of(1, 100);
  bytes.insert(bytes.end(), first.begin(), first.end());
  ASSERT_EQ(::pwrite(old.get(), bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  ASSERT_EQ(::fcntl(old.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
  const unique_fd kept(::dup(old.get()));

  journal_file adopted = journal_file::adopt(std::move(old), bytes.size(), 2 * kPage);
  EXPECT_EQ(os::file_size(kept.get()), 2 * kPage);
  ASSERT_TRUE(adopted.append(batch_of(2, 100)));
  record_map state;
  const replay_result result = replayed(kept.get(), state);
  EXPECT_EQ(result.batches, 2u);
  EXPECT_FALSE(result.torn_tail);
  EXPECT_EQ(result.end, adopted.size());
}

TEST(JournalFile, IsSealedAgainstShrinking) {
  journal_file journal = journal_file::create(kGeneration, kPage);
  EXPECT_NE(::ftruncate(journal.fd(), 0), 0);
  EXPECT_EQ(errno, EPERM);
}

}  // namespace
}  // namespace gpumem::daemon::restart
