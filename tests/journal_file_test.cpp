// The journal memfd the daemon appends to through a mapping (daemon/restart/journal_file.hpp):
// what it appends reads back through the file as a journal, a batch without room is refused
// whole, and a journal adopted from an earlier daemon goes on after its last batch.
#include "restart/journal_file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "gpumem/shared/os/memfd.hpp"
#include "restart/journal.hpp"

namespace gpumem::daemon::restart {
namespace {

constexpr std::uint64_t kGeneration = 5;

std::vector<std::byte> batch_of(std::uint64_t id, std::size_t bytes) {
  return batch(
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

TEST(JournalFile, AppendsReadBackThroughTheFileAsAJournalWithAZeroTail) {
  journal_file journal = journal_file::create(kGeneration, 8192);
  const std::uint64_t header = journal.size();
  EXPECT_EQ(header, file_header(file_kind::journal, kGeneration).size());
  for (std::uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(journal.append(batch_of(id, 100)));
  EXPECT_EQ(os::file_size(journal.fd()), 8192u);
  struct stat status {};
  ASSERT_EQ(::fstat(journal.fd(), &status), 0);
  EXPECT_GE(status.st_blocks * 512, 8192) << "the room's pages are taken when it is made";
  record_map state;
  const replay_result result = replayed(journal.fd(), state);
  EXPECT_EQ(result.batches, 3u);
  EXPECT_FALSE(result.torn_tail);
  EXPECT_EQ(result.end, journal.size());
  EXPECT_EQ(state.size(), 3u);
}

TEST(JournalFile, ABatchWithoutRoomIsRefusedAndNothingOfItWritten) {
  journal_file journal = journal_file::create(kGeneration, 4096);
  ASSERT_TRUE(journal.append(batch_of(1, 1000)));
  const std::uint64_t before = journal.size();
  EXPECT_FALSE(journal.append(batch_of(2, 4096)));
  EXPECT_EQ(journal.size(), before);
  record_map state;
  const replay_result result = replayed(journal.fd(), state);
  EXPECT_EQ(result.batches, 1u);
  EXPECT_FALSE(result.torn_tail);
  // Up to the last byte of room: a batch that fills it exactly fits.
  const std::uint64_t left = 4096 - journal.size();
  const std::size_t framing = batch_of(3, 0).size();
  EXPECT_TRUE(journal.append(batch_of(3, left - framing)));
  EXPECT_EQ(journal.size(), 4096u);
  EXPECT_FALSE(journal.append(batch_of(4, 0)));
}

TEST(JournalFile, AnAdoptedJournalGoesOnAfterItsLastBatchAndGrowsToItsRoom) {
  journal_file first = journal_file::create(kGeneration, 4096);
  ASSERT_TRUE(first.append(batch_of(1, 100)));
  const unique_fd kept(::dup(first.fd()));  // as systemd's fd store keeps it
  const std::uint64_t end = first.size();
  first = journal_file();  // the daemon that wrote it is gone

  journal_file adopted = journal_file::adopt(unique_fd(::dup(kept.get())), end, 16384);
  EXPECT_EQ(adopted.size(), end);
  EXPECT_EQ(os::file_size(kept.get()), 16384u);
  ASSERT_TRUE(adopted.append(batch_of(2, 8000)));
  record_map state;
  const replay_result result = replayed(kept.get(), state);
  EXPECT_EQ(result.batches, 2u);
  EXPECT_FALSE(result.torn_tail);
  EXPECT_EQ(state.size(), 2u);
}

TEST(JournalFile, IsSealedAgainstShrinking) {
  journal_file journal = journal_file::create(kGeneration, 4096);
  EXPECT_NE(::ftruncate(journal.fd(), 0), 0);
  EXPECT_EQ(errno, EPERM);
}

}  // namespace
}  // namespace gpumem::daemon::restart
