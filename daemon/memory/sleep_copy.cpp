#include "memory/sleep_copy.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <thread>
#include <vector>

#include "gpumem/shared/os/memfd.hpp"

namespace gpumem::daemon {

namespace {
// Threads that fault in a sleep copy's pages: the kernel zeroes each page it hands out, and one
// thread does that at a few GB/s.
constexpr unsigned kPopulatingThreads = 8;
constexpr std::uint64_t kPopulateSlice = 64u << 20;

void populate(std::byte* start, std::uint64_t bytes) {
  const unsigned threads = std::max(
      1u, std::min({kPopulatingThreads, std::thread::hardware_concurrency(),
                    static_cast<unsigned>((bytes + kPopulateSlice - 1) / kPopulateSlice)}));
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t share = (bytes / threads + page - 1) / page * page;
  std::vector<std::thread> workers;
  std::vector<int> failures(threads, 0);
  for (unsigned index = 0; index < threads; ++index) {
    const std::uint64_t from = std::min(bytes, index * share);
    const std::uint64_t length = std::min(bytes, from + share) - from;
    workers.emplace_back([=, &failures] {
      if (length != 0 && ::madvise(start + from, length, MADV_POPULATE_WRITE) != 0) {
        failures[index] = errno;
      }
    });
  }
  for (std::thread& each : workers) each.join();
  for (const int failure : failures) {
    // EINVAL: a kernel before 5.14, which lacks MADV_POPULATE_WRITE; the copy faults pages in.
    if (failure != 0 && failure != EINVAL) {
      throw std::system_error(failure, std::system_category(), "populating a sleep copy");
    }
  }
}
}  // namespace

sleep_copy sleep_copy::make(std::uint64_t bytes, std::uint64_t made_at_attempt) {
  sleep_copy made;
  made.bytes = bytes;
  made.made_at_attempt = made_at_attempt;
  made.memory = os::make_sealed_memfd("gpumemd:asleep", bytes);
  if (bytes == 0) return made;
  made.mapped = os::mapping::share(made.memory.get(), bytes, os::access::read_write);
  populate(static_cast<std::byte*>(made.mapped.get()), bytes);
  return made;
}

sleep_copy sleep_copy::adopt(unique_fd memory, std::uint64_t made_at_attempt) {
  sleep_copy kept;
  kept.made_at_attempt = made_at_attempt;
  kept.bytes = os::file_size(memory.get());
  kept.memory = std::move(memory);
  if (kept.bytes != 0) {
    kept.mapped = os::mapping::share(kept.memory.get(), kept.bytes, os::access::read_write);
  }
  return kept;
}

}  // namespace gpumem::daemon
