#pragma once
// The kernel mechanisms a request through the mailbox rides on, with nothing of gpumemd's on
// them: the raw peer of a ping's round trip. A forked server sleeps in epoll_wait on an
// edge-triggered eventfd, the doorbell, as the daemon's loop does; the caller stores a
// sequence number in shared memory, rings, and sleeps on a futex until the server stores the
// same number back and wakes it, as a library call does with no answer spin. Its tail after a
// pause is the host's: both sides' wake-ups and nothing else.

#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <new>
#include <stdexcept>

#include "gpumem/shared/sync/futex.hpp"

namespace gpumem::bench {

class raw_round_trip {
 public:
  raw_round_trip() {
    void* memory =
        ::mmap(nullptr, sizeof(words), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::runtime_error("raw round trip: mmap");
    words_ = new (memory) words{};
    doorbell_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const pid_t caller = ::getpid();
    server_ = doorbell_ < 0 ? -1 : ::fork();
    if (server_ == 0) serve(caller);
    if (server_ < 0) {
      close_all();
      throw std::runtime_error("raw round trip: eventfd or fork failed");
    }
  }
  ~raw_round_trip() {
    ::kill(server_, SIGKILL);
    ::waitpid(server_, nullptr, 0);
    close_all();
  }
  raw_round_trip(const raw_round_trip&) = delete;
  raw_round_trip& operator=(const raw_round_trip&) = delete;

  /// One request and its answer.
  void round_trip() {
    const std::uint32_t sequence = ++sent_;
    request().store(sequence, std::memory_order_release);
    const std::uint64_t ring = 1;
    (void)!::write(doorbell_, &ring, sizeof ring);
    for (std::uint32_t seen; (seen = answer().load(std::memory_order_acquire)) != sequence;) {
      // A bounded sleep, so that a server that is gone is found instead of waited for.
      sync::futex_wait(&words_->answer, seen, std::chrono::milliseconds(100));
      if (answer().load(std::memory_order_acquire) != sequence &&
          ::waitpid(server_, nullptr, WNOHANG) != 0) {
        throw std::runtime_error("raw round trip: its server is gone");
      }
    }
  }

 private:
  struct words {
    std::uint32_t request;
    std::uint32_t answer;
  };
  std::atomic_ref<std::uint32_t> request() const { return std::atomic_ref(words_->request); }
  std::atomic_ref<std::uint32_t> answer() const { return std::atomic_ref(words_->answer); }

  void close_all() noexcept {
    if (doorbell_ >= 0) ::close(doorbell_);
    ::munmap(words_, sizeof(words));
  }

  /// The server ends with its caller, also with one killed before its destructor ran: it holds
  /// the caller's inherited descriptors (a benchmark child's result pipe among them) open.
  [[noreturn]] void serve(pid_t caller) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != caller) ::_exit(1);
    const int ready = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event interest{};
    interest.events = EPOLLIN | EPOLLET;  // never read, as the daemon never reads a doorbell
    if (ready < 0 || ::epoll_ctl(ready, EPOLL_CTL_ADD, doorbell_, &interest) != 0) ::_exit(1);
    for (;;) {
      epoll_event event;
      if (::epoll_wait(ready, &event, 1, -1) < 0) continue;  // EINTR
      answer().store(request().load(std::memory_order_acquire), std::memory_order_release);
      sync::futex_wake(&words_->answer, 1);
    }
  }

  words* words_ = nullptr;
  int doorbell_ = -1;
  pid_t server_ = -1;
  std::uint32_t sent_ = 0;
};

}  // namespace gpumem::bench
