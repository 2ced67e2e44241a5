#include "gpumem/shared/fd_passing.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "gpumem/proto/wire.hpp"
#include "support/open_fds.hpp"

namespace gpumem {
namespace {

using testing::open_fds_of_this_process;

struct socket_pair {
  socket_pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
  unique_fd a, b;
};

std::vector<unique_fd> pipes(std::size_t count) {
  std::vector<unique_fd> ends;
  for (std::size_t i = 0; i < count; ++i) {
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    ends.emplace_back(p[0]);
    ::close(p[1]);
  }
  return ends;
}

std::vector<int> raw(const std::vector<unique_fd>& fds) {
  std::vector<int> out;
  for (const auto& fd : fds) out.push_back(fd.get());
  return out;
}

ino_t inode(int fd) {
  struct stat info {};
  EXPECT_EQ(::fstat(fd, &info), 0);
  return info.st_ino;
}

TEST(FdPassing, BytesAndDescriptorsArriveTogetherAndCloseOnExec) {
  socket_pair pair;
  const auto sent_fds = pipes(3);
  const std::byte payload[5] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4},
                                std::byte{5}};
  std::error_code error;
  EXPECT_EQ(send_with_fds(pair.a.get(), payload, raw(sent_fds), error), sizeof payload);
  ASSERT_FALSE(error);
  std::byte buffer[16];
  std::vector<unique_fd> received;
  EXPECT_EQ(recv_with_fds(pair.b.get(), buffer, received, error), sizeof payload);
  ASSERT_FALSE(error);
  EXPECT_EQ(std::memcmp(buffer, payload, sizeof payload), 0);
  ASSERT_EQ(received.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(inode(received[i].get()), inode(sent_fds[i].get()));
    EXPECT_TRUE(::fcntl(received[i].get(), F_GETFD) & FD_CLOEXEC);
  }
}

TEST(FdPassing, TheKernelLimitOf253PerMessageHoldsAndOneMoreIsRefused) {
  socket_pair pair;
  const auto many = pipes(proto::kMaxFdsPerMessage + 1);
  auto fds = raw(many);
  const std::byte one{7};
  std::error_code error;
  send_with_fds(pair.a.get(), std::span(&one, 1), fds, error);
  EXPECT_EQ(error, std::errc::invalid_argument);
  fds.pop_back();
  EXPECT_EQ(send_with_fds(pair.a.get(), std::span(&one, 1), fds, error), 1u);
  ASSERT_FALSE(error);
  std::byte buffer[4];
  std::vector<unique_fd> received;
  recv_with_fds(pair.b.get(), buffer, received, error);
  ASSERT_FALSE(error);
  EXPECT_EQ(received.size(), proto::kMaxFdsPerMessage);
}

TEST(FdPassing, TruncatedControlMessageIsAnErrorAndLeaksNothing) {
  socket_pair pair;
  const auto sent_fds = pipes(8);
  const std::byte one{7};
  std::error_code error;
  ASSERT_EQ(send_with_fds(pair.a.get(), std::span(&one, 1), raw(sent_fds), error), 1u);
  // A receiver whose descriptor table is nearly full gets MSG_CTRUNC from the kernel.
  const pid_t child = ::fork();
  if (child == 0) {
    int highest = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      highest = std::max(highest, std::stoi(entry.path().filename().string()));
    }
    const rlimit tight{static_cast<rlim_t>(highest + 8), static_cast<rlim_t>(highest + 8)};
    if (::setrlimit(RLIMIT_NOFILE, &tight) != 0) ::_exit(10);
    // Fill every free slot, then leave room for two of the eight descriptors on their way.
    std::vector<unique_fd> fillers;
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.emplace_back(fd);
    fillers.resize(fillers.size() - 2);
    const std::size_t before = open_fds_of_this_process();
    std::byte buffer[4];
    std::vector<unique_fd> received;
    std::error_code child_error;
    recv_with_fds(pair.b.get(), buffer, received, child_error);
    if (child_error != std::errc::protocol_error) ::_exit(11);
    if (!received.empty()) ::_exit(12);
    ::_exit(open_fds_of_this_process() == before ? 0 : 13);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(FdPassing, EndOfStreamReadsAsZeroBytes) {
  socket_pair pair;
  pair.a.reset();
  std::byte buffer[4];
  std::vector<unique_fd> received;
  std::error_code error;
  EXPECT_EQ(recv_with_fds(pair.b.get(), buffer, received, error), 0u);
  EXPECT_FALSE(error);
}

TEST(FdPassing, WritingToAClosedPeerIsAnErrorNotASignal) {
  socket_pair pair;
  pair.b.reset();
  const std::byte one{1};
  std::error_code error;
  send_with_fds(pair.a.get(), std::span(&one, 1), {}, error);
  EXPECT_EQ(error, std::errc::broken_pipe);
}

}  // namespace
}  // namespace gpumem
