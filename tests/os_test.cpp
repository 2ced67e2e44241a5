#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
