#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "gpumem/shared/os/mapping.hpp"
#include "gpumem/shared/os/memfd.hpp"

namespace gpumem::os {
namespace {

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

bool is_mapped(const void* start) {
  unsigned char resident = 0;
  // mincore fails with ENOMEM on an address that nothing maps.
  return ::mincore(const_cast<void*>(start), kPage, &resident) == 0;
}

TEST(SealedMemfd, HasTheSizeAskedForAndCannotBeResized) {
  const unique_fd fd = make_sealed_memfd("os_test", 4 * kPage);
  struct stat status {};
  ASSERT_EQ(::fstat(fd.get(), &status), 0);
  EXPECT_EQ(static_cast<std::size_t>(status.st_size), 4 * kPage);
  EXPECT_NE(::ftruncate(fd.get(), static_cast<off_t>(kPage)), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(fd.get(), static_cast<off_t>(8 * kPage)), 0);
}

// A reader of another uid holds the read-only descriptor: it may neither map it writable nor
// open it again read-write through /proc/self/fd (which checks the memfd's mode, not the fd's).
TEST(SealedMemfd, AReadOnlyDescriptorStaysReadOnlyForAnotherUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another uid (nobody)";
  const unique_fd fd = make_sealed_memfd("os_test", kPage);
  const unique_fd read_only = reopen_read_only(fd.get());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    const std::string path = "/proc/self/fd/" + std::to_string(read_only.get());
    if (::open(path.c_str(), O_RDWR) >= 0) ::_exit(3);
    if (::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, read_only.get(), 0) !=
        MAP_FAILED) {
      ::_exit(4);
    }
    ::_exit(::mmap(nullptr, kPage, PROT_READ, MAP_SHARED, read_only.get(), 0) == MAP_FAILED);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no uid change, 3: reopened read-write, 4: mapped "
                                       "writable, 1: could not even read";
}

TEST(Mapping, SharesTheFileWithEveryOtherMapping) {
  const unique_fd fd = make_sealed_memfd("os_test", 2 * kPage);
  const mapping writer = mapping::share(fd.get(), 2 * kPage, access::read_write);
  const mapping reader = mapping::share(fd.get(), kPage, access::read_only, kPage);
  std::memcpy(static_cast<char*>(writer.get()) + kPage, "shared", 7);
  EXPECT_STREQ(static_cast<const char*>(reader.get()), "shared");
  EXPECT_EQ(reader.size(), kPage);
}

TEST(Mapping, UnmapsWhenDestroyedOrReset) {
  const unique_fd fd = make_sealed_memfd("os_test", kPage);
  void* start = nullptr;
  {
    const mapping mapped = mapping::share(fd.get(), kPage, access::read_write);
    start = mapped.get();
    EXPECT_TRUE(is_mapped(start));
  }
  EXPECT_FALSE(is_mapped(start));
  mapping reset_early = mapping::share(fd.get(), kPage, access::read_write);
  start = reset_early.get();
  reset_early.reset();
  EXPECT_FALSE(reset_early);
  EXPECT_FALSE(is_mapped(start));
}

TEST(Mapping, MovingHandsOverAndReleaseGivesUp) {
  const unique_fd fd = make_sealed_memfd("os_test", kPage);
  mapping first = mapping::share(fd.get(), kPage, access::read_write);
  void* const start = first.get();
  mapping second = std::move(first);
  EXPECT_FALSE(first);  // NOLINT(bugprone-use-after-move): moved-from mappings are empty
  EXPECT_EQ(second.get(), start);
  EXPECT_EQ(second.release(), start);
  second.reset();
  EXPECT_TRUE(is_mapped(start));
  mapping(start, kPage).reset();  // taken over again, and unmapped
  EXPECT_FALSE(is_mapped(start));
}

TEST(Mapping, ReportsAFailureByCodeOrByException) {
  std::error_code error;
  const mapping none = mapping::share(-1, kPage, access::read_only, 0, error);
  EXPECT_FALSE(none);
  EXPECT_EQ(error, std::errc::bad_file_descriptor);
  EXPECT_THROW(mapping::share(-1, kPage, access::read_only), std::system_error);
}

}  // namespace
}  // namespace gpumem::os
