// gpumem_gpu_sync_peer: a CUDA client process for the lock, barrier and channel tests.
//   stream-lock-count LOCK BUFFER|- N
//                      N times, without waiting on the host: lock(stream), a kernel that
//                      increments the plain counter at BUFFER, unlock(stream); then "done"
//   stream-lock-queue LOCK...
//                      lock(stream) each in turn and never unlock; print "queued", wait to be
//                      killed
//   stream-lock-relock LOCK
//                      lock(stream) (turn 0 of a new lock), print "held", wait for SIGUSR1; then
//                      a thread locks the same Lock object on another stream while this thread
//                      unlocks turn 0; "done" once both streams ran
//   stream-lock-fill LOCK TURNS STREAMS
//                      TURNS times lock(stream) and unlock(stream) on STREAMS streams in turn;
//                      print "queued", then "done" once they all ran
//   device-lock-count LOCK BUFFER BLOCKS THREADS ITERATIONS
//                      every thread adds one ITERATIONS times under with_lock(); "done"
//   device-lock-hold LOCK
//                      a kernel takes the device lock and spins; print "held" once it has
//   stream-barrier-rounds NAME PARTIES ROUNDS BUFFER
//                      each round: write the round to this party's slot, arrive(stream),
//                      wait(stream), check every slot on the GPU; print "ok" or "bad N"
//   barrier-join NAME PARTIES
//                      join in the GPU domain, print "ready", wait to be killed
//   stream-channel-produce NAME ITEMS CONSUMERS SLOTS BYTES [BATCH]
//   stream-channel-consume NAME ITEMS CONSUMERS SLOTS BYTES [BATCH]
//                      pass patterned items in stream order, BATCH at a time (default 1; the
//                      consumer hands a batch on in two parts); the consumer checks each on the
//                      GPU and prints "ok ITEMS" or "bad N"
//   device-channel-produce NAME ITEMS CONSUMERS SLOTS BYTES
//   device-channel-consume NAME ITEMS CONSUMERS SLOTS BYTES [BLOCKS]
//                      the same in one kernel each (gpumem/device.cuh), the consumer's BLOCKS
//                      (default 1) taking the items in turn: the producer prints "done", the
//                      consumer "ok ITEMS" or "bad N"; either "broken at N" when the channel
//                      broke after N items
//   device-barrier-rounds NAME PARTIES ROUNDS BUFFER
//                      stream-barrier-rounds in one kernel; "ok", "bad N" or "broken at N"
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/gpumem.hpp"
#include "sync_kernels.hpp"

namespace {

using namespace gpumem::testing;
using namespace std::chrono_literals;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] void wait_forever() {
  for (;;) ::pause();
}

/// A device word the kernels count errors into, read back at the end.
class error_count {
 public:
  error_count(gpumem::Client& client, stream_t stream)
      : buffer_(client.allocate(sizeof(unsigned long long), {.device = 0, .stream = stream})),
        stream_(stream) {
    zero_on_device(buffer_.data(), buffer_.size(), stream);
  }
  unsigned long long* device() { return static_cast<unsigned long long*>(buffer_.data()); }
  unsigned long long read() {
    unsigned long long value = 0;
    copy_to_host(&value, buffer_.data(), sizeof value, stream_);
    return value;
  }

 private:
  gpumem::Buffer buffer_;
  stream_t stream_;
};

/// What a kernel of sync_kernels.hpp passed (items or rounds) and whether the object broke.
class kernel_outcome {
 public:
  kernel_outcome(gpumem::Client& client, stream_t stream)
      : buffer_(client.allocate(2 * sizeof(unsigned), {.device = 0, .stream = stream})),
        stream_(stream) {
    zero_on_device(buffer_.data(), buffer_.size(), stream);
  }
  unsigned* device() { return static_cast<unsigned*>(buffer_.data()); }
  /// "broken at N", else @p passed_all.
  std::string verdict(const std::string& passed_all) {
    unsigned words[2]{};
    copy_to_host(words, buffer_.data(), sizeof words, stream_);
    return words[1] != 0 ? "broken at " + std::to_string(words[0]) : passed_all;
  }

 private:
  gpumem::Buffer buffer_;
  stream_t stream_;
};

/// NAME ITEMS CONSUMERS SLOTS BYTES, as the channel commands take them.
gpumem::ChannelOptions channel_shape(char** argv) {
  return {.slots = static_cast<std::uint32_t>(std::stoul(argv[5])),
          .slot_bytes = std::stoull(argv[6]),
          .consumers = static_cast<std::uint32_t>(std::stoul(argv[4])),
          .device = 0};
}

int pass_items_by_kernel(gpumem::Client& client, bool producing, char** argv, stream_t stream) {
  const auto items = static_cast<unsigned>(std::stoul(argv[3]));
  const gpumem::ChannelOptions options = channel_shape(argv);
  auto channel = client.channel(
      argv[2], producing ? gpumem::ChannelRole::producer : gpumem::ChannelRole::consumer, options);
  error_count errors(client, stream);
  kernel_outcome outcome(client, stream);
  const unsigned blocks = argv[7] != nullptr ? static_cast<unsigned>(std::stoul(argv[7])) : 1;
  pass_items_in_kernel(channel.device(0), producing, channel.slot_data(0), options.slots,
                       options.slot_bytes, items, errors.device(), outcome.device(), stream,
                       blocks);
  const auto bad = errors.read();
  const std::string verdict = outcome.verdict(
      producing ? "done"
                : (bad == 0 ? "ok " + std::to_string(items) : "bad " + std::to_string(bad)));
  say(verdict);
  return verdict == "done" || verdict.starts_with("ok ") ? 0 : 1;
}

int pass_items(gpumem::Client& client, bool producing, char** argv, stream_t stream) {
  const std::uint64_t items = std::stoull(argv[3]);
  const gpumem::ChannelOptions options = channel_shape(argv);
  auto channel = client.channel(
      argv[2], producing ? gpumem::ChannelRole::producer : gpumem::ChannelRole::consumer, options);
  const std::uint64_t batch = argv[7] != nullptr ? std::stoull(argv[7]) : 1;
  error_count errors(client, stream);
  for (std::uint64_t item = 0; item < items;) {
    const auto count = static_cast<std::uint32_t>(std::min(batch, items - item));
    if (producing) {
      const auto first = channel.acquire_slot(stream, count);
      for (std::uint32_t k = 0; k < count; ++k) {
        fill_on_device(channel.slot_data(first.sequence + k), options.slot_bytes,
                       static_cast<std::uint32_t>(item + k), stream);
      }
      channel.publish(stream, count);
    } else {
      const auto first = channel.acquire(stream, count);
      for (std::uint32_t k = 0; k < count; ++k) {
        count_mismatches(channel.slot_data(first.sequence + k), options.slot_bytes,
                         static_cast<std::uint32_t>(item + k), errors.device(), stream);
      }
      channel.release(stream, 1);
      if (count > 1) channel.release(stream, count - 1);
    }
    item += count;
  }
  const auto bad = errors.read();
  if (producing) {
    say("done");
  } else {
    say(bad == 0 ? "ok " + std::to_string(items) : "bad " + std::to_string(bad));
  }
  return bad == 0 ? 0 : 1;
}

int run(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  auto client = gpumem::Client::connect({.label = "gpu-sync-peer-" + command});
  stream_t stream = make_stream();
  if (command == "stream-lock-count" && argc == 5) {
    auto lock = client.lock(argv[2]);
    auto counter = std::string(argv[3]) == "-"
                       ? client.allocate(sizeof(std::uint64_t), {.device = 0, .stream = stream})
                       : client.open(argv[3], {.stream = stream});
    for (std::uint64_t i = 0, n = std::stoull(argv[4]); i < n; ++i) {
      lock.lock(stream);
      increment_slowly(static_cast<std::uint64_t*>(counter.data()), stream);
      lock.unlock(stream);
    }
    synchronize(stream);
    say("done");
    return 0;
  }
  if (command == "stream-lock-queue" && argc >= 3) {
    std::vector<gpumem::Lock> locks;
    for (int named = 2; named < argc; ++named) {
      locks.push_back(client.lock(argv[named]));
      locks.back().lock(stream);
    }
    say("queued");
    wait_forever();
  }
  if (command == "stream-lock-relock" && argc == 3) {
    sigset_t go;
    sigemptyset(&go);
    sigaddset(&go, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &go, nullptr);
    auto lock = client.lock(argv[2]);
    lock.lock(stream);
    say("held");
    int received = 0;
    sigwait(&go, &received);
    stream_t other = make_stream();
    std::thread queuer([&] {
      lock.lock(other);  // with the queue full, it waits for turn 0 to pass
      lock.unlock(other);
    });
    std::this_thread::sleep_for(200ms);  // the queuer is waiting by then
    lock.unlock(stream);
    queuer.join();
    synchronize(stream);
    synchronize(other);
    say("done");
    return 0;
  }
  if (command == "stream-lock-fill" && argc == 5) {
    auto lock = client.lock(argv[2]);
    // In ticket order on every stream, so that no wait stands before an earlier turn's in a
    // hardware queue that streams share.
    std::vector<stream_t> streams(std::stoul(argv[4]));
    for (stream_t& each : streams) each = make_stream();
    for (std::uint64_t turn = 0, turns = std::stoull(argv[3]); turn < turns; ++turn) {
      lock.lock(streams[turn % streams.size()]);
      lock.unlock(streams[turn % streams.size()]);
    }
    say("queued");
    for (stream_t each : streams) synchronize(each);
    say("done");
    return 0;
  }
  if (command == "device-lock-count" && argc == 7) {
    auto lock = client.lock(argv[2]);
    auto counter = client.open(argv[3], {.stream = stream});
    count_under_device_lock(lock.device(0), static_cast<std::uint64_t*>(counter.data()),
                            static_cast<unsigned>(std::stoul(argv[4])),
                            static_cast<unsigned>(std::stoul(argv[5])),
                            static_cast<unsigned>(std::stoul(argv[6])), stream);
    synchronize(stream);
    say("done");
    return 0;
  }
  if (command == "device-lock-hold" && argc == 3) {
    auto lock = client.lock(argv[2]);
    auto taken = client.allocate(sizeof(unsigned), {.device = 0, .stream = stream});
    zero_on_device(taken.data(), taken.size(), stream);
    synchronize(stream);
    hold_device_lock_forever(lock.device(0), static_cast<unsigned*>(taken.data()), stream);
    stream_t reader = make_stream();
    unsigned seen = 0;
    while (seen == 0) {
      std::this_thread::sleep_for(1ms);
      copy_to_host(&seen, taken.data(), sizeof seen, reader);
    }
    say("held");
    wait_forever();
  }
  if (command == "stream-barrier-rounds" && argc == 6) {
    const auto parties = static_cast<unsigned>(std::stoul(argv[3]));
    auto barrier = client.barrier(argv[2], parties);
    auto slots = client.open(argv[5], {.stream = stream});
    auto* progress = static_cast<std::uint32_t*>(slots.data());
    error_count errors(client, stream);
    for (unsigned round = 1, rounds = static_cast<unsigned>(std::stoul(argv[4])); round <= rounds;
         ++round) {
      write_round(progress, barrier.party(), round, stream);
      barrier.wait(barrier.arrive(stream), stream);
      check_round(progress, parties, round, errors.device(), stream);
    }
    const auto bad = errors.read();
    say(bad == 0 ? "ok" : "bad " + std::to_string(bad));
    return bad == 0 ? 0 : 1;
  }
  if (command == "device-barrier-rounds" && argc == 6) {
    auto barrier = client.barrier(argv[2], static_cast<std::uint32_t>(std::stoul(argv[3])));
    auto slots = client.open(argv[5], {.stream = stream});
    error_count errors(client, stream);
    kernel_outcome outcome(client, stream);
    barrier_rounds_in_kernel(barrier.device(0), static_cast<std::uint32_t*>(slots.data()),
                             static_cast<unsigned>(std::stoul(argv[4])), errors.device(),
                             outcome.device(), stream);
    const auto bad = errors.read();
    const std::string verdict = outcome.verdict(bad == 0 ? "ok" : "bad " + std::to_string(bad));
    say(verdict);
    return verdict == "ok" ? 0 : 1;
  }
  if (command == "barrier-join" && argc == 4) {
    auto barrier = client.barrier(argv[2], static_cast<std::uint32_t>(std::stoul(argv[3])));
    barrier.device(0);
    say("ready");
    wait_forever();
  }
  if ((command == "stream-channel-produce" || command == "stream-channel-consume") &&
      (argc == 7 || argc == 8)) {
    return pass_items(client, command == "stream-channel-produce", argv, stream);
  }
  if ((command == "device-channel-produce" && argc == 7) ||
      (command == "device-channel-consume" && (argc == 7 || argc == 8))) {
    return pass_items_by_kernel(client, command == "device-channel-produce", argv, stream);
  }
  std::fprintf(stderr, "gpumem_gpu_sync_peer: bad arguments\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    say(std::string("error ") + error.what());
    return 3;
  }
}
