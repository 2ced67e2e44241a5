// Two processes share one named buffer through gpumemd.
//
//   share_named_buffer write frames   # allocates "frames", fills it, holds it
//   share_named_buffer read frames    # opens "frames" by name and checks the bytes
//
// The writer holds the buffer until it is told to stop (SIGINT or SIGTERM); the reader may
// come any time before that, and the bytes it sees are the writer's.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "gpumem/gpumem.hpp"

namespace {

constexpr std::size_t kSize = 1 << 20;

std::uint8_t byte_at(std::size_t i) {
  return static_cast<std::uint8_t>(i * 31 + 7);
}

std::uint64_t fnv1a(const void* data, std::size_t size) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < size; ++i) {
    hash = (hash ^ static_cast<const std::uint8_t*>(data)[i]) * 0x100000001b3ull;
  }
  return hash;
}

int write(const std::string& name) {
  // Block the stop signals before any thread exists, then wait for one of them below.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  auto client = gpumem::Client::connect({.label = "demo-writer"});
  gpumem::Buffer buffer = client.allocate(kSize, {.device = gpumem::kHost, .name = name});
  auto* bytes = static_cast<std::uint8_t*>(buffer.data());
  for (std::size_t i = 0; i < kSize; ++i) bytes[i] = byte_at(i);
  std::printf(
      "writer: pid %d wrote %zu bytes to '%s' (fnv1a %016llx); holding it until SIGINT "
      "or SIGTERM\n",
      static_cast<int>(::getpid()), kSize, name.c_str(),
      static_cast<unsigned long long>(fnv1a(bytes, kSize)));
  std::fflush(stdout);
  const timespec limit{600, 0};
  const int signal = sigtimedwait(&stop, nullptr, &limit);
  std::printf("writer: %s; releasing '%s'\n", signal > 0 ? strsignal(signal) : "time is up",
              name.c_str());
  return 0;
}

int read(const std::string& name) {
  auto client = gpumem::Client::connect({.label = "demo-reader"});
  gpumem::Buffer buffer = client.open(name, {.access = gpumem::Access::read_only});
  const auto* bytes = static_cast<const std::uint8_t*>(buffer.data());
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    if (bytes[i] != byte_at(i)) {
      std::fprintf(stderr, "reader: byte %zu differs\n", i);
      return 1;
    }
  }
  std::printf("reader: pid %d opened '%s' by name: %zu bytes (fnv1a %016llx), all as written\n",
              static_cast<int>(::getpid()), name.c_str(), buffer.size(),
              static_cast<unsigned long long>(fnv1a(bytes, buffer.size())));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 3 ? argv[1] : "";
  try {
    if (mode == "write") return write(argv[2]);
    if (mode == "read") return read(argv[2]);
  } catch (const gpumem::Error& error) {
    std::fprintf(stderr, "%s: %s\n", argv[0], error.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s write|read NAME\n", argv[0]);
  return 2;
}
