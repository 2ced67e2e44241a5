// The reservation book on the host backend: versions, sleep and wake, and who may do what, driven
// directly (the copies run when the test says, through a background it holds in its hand).
#include "memory/reservation_book.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <functional>
#include <vector>

#include "books.hpp"
#include "request_error.hpp"
#include "support/host_pools.hpp"

namespace gpumem::daemon {
namespace {

using proto::errc;
constexpr std::uint64_t kChunk = 2u << 20;

errc code_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const request_error& error) {
    return error.code();
  }
  return errc::ok;
}

std::string text_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const request_error& error) {
    return error.what();
  }
  return {};
}

/// Jobs and deadlines wait until the test runs them.
class manual_background final : public background {
 public:
  void run(std::function<void()> work, std::function<void(std::exception_ptr)> done) override {
    jobs_.push_back({std::move(work), std::move(done)});
  }
  void after(std::chrono::milliseconds, std::function<void()> then) override {
    deadlines_.push_back(std::move(then));
  }
  std::size_t pending_jobs() const { return jobs_.size(); }
  std::size_t jobs_run() const { return jobs_run_; }
  void finish_jobs() {
    while (!jobs_.empty()) {
      auto [work, done] = std::move(jobs_.front());
      jobs_.pop_front();
      ++jobs_run_;
      std::exception_ptr failure;
      try {
        work();
      } catch (...) {
        failure = std::current_exception();
      }
      done(failure);
    }
  }
  void pass_deadlines() {
    auto due = std::move(deadlines_);
    deadlines_.clear();
    for (auto& then : due) then();
  }

 private:
  std::deque<std::pair<std::function<void()>, std::function<void(std::exception_ptr)>>> jobs_;
  std::vector<std::function<void()>> deadlines_;
  std::size_t jobs_run_ = 0;
};

std::vector<std::byte> bytes_of(int fd, std::size_t size) {
  std::vector<std::byte> read(size);
  EXPECT_EQ(::pread(fd, read.data(), size, 0), static_cast<ssize_t>(size));
  return read;
}

/// The inode of a sleeping reservation's host copy: the same copy reused keeps it.
ino_t host_copy_inode(const reservation_book& book, object_id id) {
  struct stat about {};
  EXPECT_EQ(::fstat(book.find(id)->host_copy()->memory.get(), &about), 0);
  return about.st_ino;
}

class ReservationBook : public ::testing::Test {
 protected:
  ReservationBook() {
    book.reservations.set_background(&worker);
    made = book.reservations.reserve(owner, request(8 * kChunk, 2 * kChunk, "weights"));
    id = made.reservation_id;
    proto::open_request open{};
    EXPECT_FALSE(proto::make_wire_name("weights", open.name));
    open.access = proto::access_mode::read_only;
    book.reservations.open(reader, open);
  }
  ~ReservationBook() override { book.reservations.set_background(nullptr); }

  static proto::reserve_request request(std::uint64_t max, std::uint64_t initial,
                                        std::string_view name) {
    proto::reserve_request r{max, initial, proto::kHostDevice, 0, {}};
    EXPECT_FALSE(proto::make_wire_name(name, r.name));
    return r;
  }
  /// What @p client maps from now on: the current version's chunks (all of them).
  proto::chunks_reply map(client_id client, std::vector<int>& fds) {
    return book.reservations.chunks(client, {id, 0, proto::chunk_set::current, 0}, fds);
  }
  void fill(int fd, unsigned char value) {
    const std::vector<unsigned char> bytes(kChunk, value);
    ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(kChunk));
  }
  proto::sleep_request sleep_of(std::uint32_t flags = 0) { return {{id, {}}, flags, 0}; }
  /// The owner's sleep and wake, their copies run to the end.
  void sleep_now() {
    book.reservations.sleep(owner, sleep_of());
    worker.finish_jobs();
  }
  void wake_now() {
    book.reservations.wake(owner, {id, {}});
    worker.finish_jobs();
  }
  /// Sets the limit, lets both holders go, sleeps and wakes: the inode of that sleep's copy.
  ino_t cycle_keeping(std::uint64_t limit) {
    book.reservations.keep_sleep_memory(limit);
    book.reservations.quiesce(reader, id);
    book.reservations.quiesce(owner, id);
    sleep_now();
    const ino_t slept = host_copy_inode(book.reservations, id);
    wake_now();
    return slept;
  }
  const proto::reservation_record& listed() {
    listing = book.reservations.list(reader, 0);
    return listing.records.at(0);
  }

  manual_background worker;
  books book{embedded_default_config(), host_pools};
  client_id owner = book.add_client({100, 1000, 1000, {}});
  client_id reader = book.add_client({101, 1000, 1000, {}});
  proto::reservation_reply made{};
  object_id id = 0;
  proto::reservation_list_reply listing;
};

TEST_F(ReservationBook, HostChunksAreMemfdsAndReadersGetReadOnlyOnes) {
  EXPECT_EQ(made.device, proto::kHostDevice);
  EXPECT_EQ(made.version, 1u);
  std::vector<int> owners, readers;
  ASSERT_EQ(map(owner, owners).records.size(), 2u);
  ASSERT_EQ(map(reader, readers).records.size(), 2u);
  EXPECT_EQ(::fcntl(owners[0], F_GETFL) & O_ACCMODE, O_RDWR);
  EXPECT_EQ(::fcntl(readers[0], F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(::fcntl(book.reservations.notice_fd(id), F_GETFL) & O_ACCMODE, O_RDONLY);
}

TEST_F(ReservationBook, AVersionIsWrittenBesideTheOneReadersMapAndSwitchedWhole) {
  std::vector<int> v1;
  map(reader, v1);
  const std::uint32_t before = book.reservations.status(owner, {id, {}}).generation;

  EXPECT_EQ(code_of([&] {
              book.reservations.begin_version(reader, {id, kChunk});
            }),
            errc::permission_denied);
  const auto draft = book.reservations.begin_version(owner, {id, 3 * kChunk});
  EXPECT_EQ(draft.version, 2u);
  EXPECT_EQ(draft.committed, 3 * kChunk) << "a version may differ in size";
  EXPECT_EQ(code_of([&] {
              book.reservations.begin_version(owner, {id, kChunk});
            }),
            errc::wrong_state)
      << "one draft at a time";
  std::vector<int> drafts;
  EXPECT_EQ(code_of([&] {
              book.reservations.chunks(reader, {id, 0, proto::chunk_set::draft, 2}, drafts);
            }),
            errc::not_found)
      << "only its writer sees a draft";
  ASSERT_EQ(
      book.reservations.chunks(owner, {id, 0, proto::chunk_set::draft, 2}, drafts).records.size(),
      3u);
  for (const int fd : drafts) fill(fd, 2);
  EXPECT_EQ(listed().draft_version, 2u);
  EXPECT_EQ(listed().version, 1u) << "readers still see version 1";

  const auto committed = book.reservations.commit_version(owner, {id, 2});
  EXPECT_EQ(committed.version, 2u);
  EXPECT_EQ(committed.committed, 3 * kChunk);
  EXPECT_EQ(listed().holders_behind, 1u) << "the reader has not refreshed";
  EXPECT_EQ(listed().oldest_mapped, 1u);
  EXPECT_EQ(listed().retained_bytes, 2 * kChunk) << "version 1 lives while the reader maps it";

  std::vector<int> v2;
  const auto page = map(reader, v2);
  EXPECT_EQ(page.head.version, 2u);
  EXPECT_GT(page.head.generation, before);
  ASSERT_EQ(v2.size(), 3u);
  EXPECT_EQ(bytes_of(v2[2], kChunk), std::vector<std::byte>(kChunk, std::byte{2}));
  EXPECT_EQ(listed().retained_bytes, 0u) << "nobody maps version 1: it went";
  EXPECT_EQ(::pwrite(v2[0], "x", 1, 0), -1) << "a committed version never changes";
  EXPECT_EQ(code_of([&] { book.reservations.resize(owner, {id, 4 * kChunk}); }), errc::wrong_state);
}

TEST_F(ReservationBook, CommittingADraftStillMappedWritableIsRefused) {
  book.reservations.begin_version(owner, {id, kChunk});
  std::vector<int> drafts;
  book.reservations.chunks(owner, {id, 0, proto::chunk_set::draft, 2}, drafts);
  void* mapped = ::mmap(nullptr, kChunk, PROT_READ | PROT_WRITE, MAP_SHARED, drafts[0], 0);
  ASSERT_NE(mapped, MAP_FAILED);
  EXPECT_EQ(code_of([&] { book.reservations.commit_version(owner, {id, 2}); }), errc::busy);
  EXPECT_EQ(listed().version, 1u);
  ::munmap(mapped, kChunk);
  EXPECT_EQ(book.reservations.commit_version(owner, {id, 2}).version, 2u);
}

TEST_F(ReservationBook, AWriterThatDiesMidVersionLeavesTheCurrentOneAndItsDraftGoes) {
  std::vector<int> v1;
  map(reader, v1);
  book.reservations.begin_version(owner, {id, 4 * kChunk});
  EXPECT_EQ(listed().retained_bytes, 4 * kChunk);
  book.remove_client(owner);
  const auto& after = listed();
  EXPECT_EQ(after.version, 1u);
  EXPECT_EQ(after.draft_version, 0u);
  EXPECT_EQ(after.retained_bytes, 0u);
  std::vector<int> again;
  EXPECT_EQ(map(reader, again).records.front().chunk_id, map(reader, v1).records.front().chunk_id);
}

TEST_F(ReservationBook, ALaterPageOfAnOlderVersionIsRefused) {
  book.reservations.begin_version(owner, {id, kChunk});
  book.reservations.commit_version(owner, {id, 2});
  std::vector<int> fds;
  EXPECT_EQ(code_of([&] {
              book.reservations.chunks(reader, {id, 1, proto::chunk_set::current, 1}, fds);
            }),
            errc::wrong_state);
}

TEST_F(ReservationBook, SleepWaitsForHoldersThenCopiesAndWakeBringsTheBytesBack) {
  std::vector<int> v1;
  map(owner, v1);
  fill(v1[0], 7);
  fill(v1[1], 9);
  map(reader, v1);
  const auto going = book.reservations.sleep(owner, sleep_of());
  EXPECT_EQ(going.state, proto::reservation_state::draining);
  EXPECT_EQ(going.busy, 1u);
  book.reservations.quiesce(owner, id);
  EXPECT_EQ(worker.pending_jobs(), 0u) << "the reader still maps it";
  std::vector<int> none;
  const auto let_go = map(reader, none);
  EXPECT_EQ(let_go.head.state, proto::reservation_state::draining);
  EXPECT_TRUE(let_go.records.empty()) << "a holder that refreshes lets go";
  EXPECT_EQ(worker.pending_jobs(), 1u);
  worker.finish_jobs();
  const auto asleep = book.reservations.status(owner, {id, {}});
  EXPECT_EQ(asleep.state, proto::reservation_state::asleep);
  EXPECT_EQ(asleep.busy, 0u);
  EXPECT_EQ(asleep.host_bytes, 2 * kChunk);
  EXPECT_EQ(listed().host_bytes, 2 * kChunk);
  EXPECT_TRUE(map(reader, none).records.empty());
  worker.pass_deadlines();
  EXPECT_EQ(book.reservations.status(owner, {id, {}}).state, proto::reservation_state::asleep)
      << "a deadline after the sleep changes nothing";

  EXPECT_EQ(book.reservations.wake(owner, {id, {}}).busy, 1u);
  worker.finish_jobs();
  std::vector<int> woken;
  const auto page = map(reader, woken);
  EXPECT_EQ(page.head.state, proto::reservation_state::awake);
  ASSERT_EQ(woken.size(), 2u);
  EXPECT_EQ(bytes_of(woken[0], kChunk), std::vector<std::byte>(kChunk, std::byte{7}));
  EXPECT_EQ(bytes_of(woken[1], kChunk), std::vector<std::byte>(kChunk, std::byte{9}));
  EXPECT_EQ(book.reservations.status(owner, {id, {}}).host_bytes, 0u) << "the copy went";
}

TEST_F(ReservationBook, AHolderThatDoesNotLetGoIsNamedAndNothingIsFreed) {
  std::vector<int> v1, owners;
  map(reader, v1);
  map(owner, owners);
  fill(owners[0], 5);
  book.reservations.quiesce(owner, id);
  book.reservations.sleep(owner, sleep_of());
  worker.pass_deadlines();
  const auto failed = book.reservations.status(owner, {id, {}});
  EXPECT_EQ(failed.state, proto::reservation_state::awake);
  EXPECT_EQ(failed.busy, 0u);
  EXPECT_EQ(failed.error, static_cast<std::uint32_t>(errc::busy));
  EXPECT_NE(std::string(failed.reason).find("pid 101"), std::string::npos) << failed.reason;
  EXPECT_EQ(worker.pending_jobs(), 0u);
  EXPECT_EQ(bytes_of(v1[0], kChunk), std::vector<std::byte>(kChunk, std::byte{5}));
  std::vector<int> again;
  EXPECT_EQ(map(reader, again).records.size(), 2u);
}

TEST_F(ReservationBook, ASleepingReservationWhoseOwnerLeavesIsLost) {
  book.reservations.quiesce(reader, id);
  book.reservations.sleep(owner, sleep_of());
  worker.finish_jobs();
  EXPECT_EQ(listed().host_bytes, 2 * kChunk);
  book.remove_client(owner);
  const auto lost = book.reservations.status(reader, {id, {}});
  EXPECT_EQ(lost.state, proto::reservation_state::lost);
  EXPECT_EQ(lost.host_bytes, 0u) << "the host copy went with it";
  std::vector<int> fds;
  EXPECT_EQ(code_of([&] { map(reader, fds); }), errc::not_found);
}

TEST_F(ReservationBook, ADiscardingSleepWakesZeroed) {
  std::vector<int> v1;
  map(owner, v1);
  fill(v1[0], 3);
  book.reservations.quiesce(owner, id);
  book.reservations.quiesce(reader, id);
  book.reservations.sleep(owner, sleep_of(proto::kSleepDiscard));
  worker.finish_jobs();
  EXPECT_EQ(listed().host_bytes, 0u);
  book.reservations.wake(owner, {id, {}});
  worker.finish_jobs();
  std::vector<int> woken;
  map(owner, woken);
  EXPECT_EQ(bytes_of(woken[0], kChunk), std::vector<std::byte>(kChunk, std::byte{0}));
}

TEST_F(ReservationBook, AWokenCopyIsKeptWithinTheLimitAndTheNextSleepReusesIt) {
  book.reservations.keep_sleep_memory(2 * kChunk);
  book.reservations.quiesce(reader, id);
  std::vector<int> v1;
  map(owner, v1);
  fill(v1[0], 7);
  book.reservations.quiesce(owner, id);
  sleep_now();
  const ino_t first_copy = host_copy_inode(book.reservations, id);
  wake_now();
  EXPECT_EQ(book.reservations.sleep_memory_kept(), 2 * kChunk);
  EXPECT_EQ(book.reservations.status(owner, {id, {}}).host_bytes, 0u)
      << "a kept copy holds no bytes of the reservation";

  std::vector<int> woken;
  map(owner, woken);
  fill(woken[0], 11);
  book.reservations.quiesce(owner, id);
  book.reservations.sleep(owner, sleep_of());
  EXPECT_EQ(book.reservations.sleep_memory_kept(), 0u) << "the sleep took the kept copy";
  worker.finish_jobs();
  EXPECT_EQ(host_copy_inode(book.reservations, id), first_copy) << "the pages were made again";
  wake_now();
  std::vector<int> again;
  map(owner, again);
  EXPECT_EQ(bytes_of(again[0], kChunk), std::vector<std::byte>(kChunk, std::byte{11}))
      << "the second sleep's bytes, not the first's";
  EXPECT_EQ(bytes_of(again[1], kChunk), std::vector<std::byte>(kChunk, std::byte{0}));
}

TEST_F(ReservationBook, NoCopyIsKeptBeyondTheLimitOrByDefault) {
  book.reservations.quiesce(reader, id);
  book.reservations.quiesce(owner, id);
  for (const std::uint64_t limit : {std::uint64_t{0}, 2 * kChunk - 1}) {
    book.reservations.keep_sleep_memory(limit);
    sleep_now();
    const ino_t slept = host_copy_inode(book.reservations, id);
    wake_now();
    EXPECT_EQ(book.reservations.sleep_memory_kept(), 0u) << "limit " << limit;
    book.reservations.quiesce(owner, id);
    sleep_now();
    EXPECT_NE(host_copy_inode(book.reservations, id), slept) << "limit " << limit;
    wake_now();
    book.reservations.quiesce(owner, id);
  }
}

TEST_F(ReservationBook, ASleepOfAnotherSizeMakesANewCopyAndTheKeptOneGoes) {
  const ino_t two_chunks = cycle_keeping(8 * kChunk);
  book.reservations.resize(owner, {id, 3 * kChunk});
  std::vector<int> grown;
  map(owner, grown);
  ASSERT_EQ(grown.size(), 3u);
  fill(grown[2], 5);
  book.reservations.quiesce(owner, id);
  sleep_now();
  EXPECT_NE(host_copy_inode(book.reservations, id), two_chunks);
  EXPECT_EQ(book.reservations.status(owner, {id, {}}).host_bytes, 3 * kChunk);
  EXPECT_EQ(book.reservations.sleep_memory_kept(), 0u);
  wake_now();
  std::vector<int> woken;
  map(owner, woken);
  EXPECT_EQ(bytes_of(woken[2], kChunk), std::vector<std::byte>(kChunk, std::byte{5}));
  EXPECT_EQ(book.reservations.sleep_memory_kept(), 3 * kChunk);
}

TEST_F(ReservationBook, KeptCopiesGoWhenTheLimitIsLoweredOrTheReservationIsReleased) {
  cycle_keeping(2 * kChunk);
  ASSERT_EQ(book.reservations.sleep_memory_kept(), 2 * kChunk);
  book.reservations.keep_sleep_memory(kChunk);
  EXPECT_EQ(book.reservations.sleep_memory_kept(), 0u);
  EXPECT_EQ(worker.pending_jobs(), 1u) << "the worker lets the pages go, not the loop";
  worker.finish_jobs();

  book.reservations.keep_sleep_memory(2 * kChunk);
  book.reservations.quiesce(owner, id);
  sleep_now();
  wake_now();
  ASSERT_EQ(book.reservations.sleep_memory_kept(), 2 * kChunk);
  book.remove_client(reader);
  book.remove_client(owner);
  EXPECT_EQ(book.reservations.find(id), nullptr);
  EXPECT_EQ(book.reservations.sleep_memory_kept(), 0u);
  EXPECT_EQ(worker.pending_jobs(), 1u);
  worker.finish_jobs();
}

TEST_F(ReservationBook, ADiscardingSleepLeavesTheKeptCopyForTheNextSleep) {
  const ino_t kept = cycle_keeping(2 * kChunk);
  book.reservations.quiesce(owner, id);
  book.reservations.sleep(owner, sleep_of(proto::kSleepDiscard));
  worker.finish_jobs();
  EXPECT_EQ(book.reservations.sleep_memory_kept(), 2 * kChunk);
  wake_now();
  EXPECT_EQ(book.reservations.sleep_memory_kept(), 2 * kChunk) << "nothing came back to keep";
  book.reservations.quiesce(owner, id);
  sleep_now();
  EXPECT_EQ(host_copy_inode(book.reservations, id), kept);
}

TEST_F(ReservationBook, ACopyForAReservationReleasedMeanwhileGoesOnTheWorker) {
  book.reservations.quiesce(reader, id);
  book.reservations.quiesce(owner, id);
  book.reservations.sleep(owner, sleep_of());
  ASSERT_EQ(worker.pending_jobs(), 1u);
  book.remove_client(reader);
  book.remove_client(owner);
  EXPECT_EQ(book.reservations.find(id), nullptr);
  worker.finish_jobs();
  EXPECT_EQ(worker.jobs_run(), 2u) << "the copy, then letting its pages go";
}

TEST_F(ReservationBook, ASizeThatCannotBeRoundedToWholeChunksIsRefusedByName) {
  const auto huge = [&] { book.reservations.reserve(owner, request(UINT64_MAX, 0, "huge")); };
  EXPECT_EQ(code_of(huge), errc::invalid_argument);
  EXPECT_NE(text_of(huge).find("cannot be rounded up to whole"), std::string::npos)
      << text_of(huge);
  EXPECT_EQ(whole_chunk_bytes(UINT64_MAX - kChunk, kChunk), UINT64_MAX - kChunk + 1);
  EXPECT_EQ(whole_chunks(UINT64_MAX, kChunk), UINT64_MAX / kChunk + 1);
}

TEST_F(ReservationBook, OperatorsActByNameOnlyOnWhatTheyMayOperate) {
  const client_id stranger = book.add_client({102, 2000, 2000, {}});
  const client_id admin = book.add_client({103, 0, 0, {}});
  proto::sleep_request by_name{};
  EXPECT_FALSE(proto::make_wire_name("weights", by_name.target.name));
  const std::string refusal = text_of([&] { book.reservations.sleep(stranger, by_name); });
  EXPECT_NE(refusal.find("may not put to sleep"), std::string::npos) << refusal;
  // As an open by name would be: refused, naming it without its owner.
  const std::string status_refusal =
      text_of([&] { book.reservations.status(stranger, by_name.target); });
  EXPECT_EQ(code_of([&] { book.reservations.status(stranger, by_name.target); }),
            errc::permission_denied);
  EXPECT_NE(status_refusal.find("may not read the state of reservation 'weights' (id "),
            std::string::npos)
      << status_refusal;
  EXPECT_EQ(status_refusal.find("owner uid"), std::string::npos) << status_refusal;
  book.reservations.quiesce(owner, id);
  book.reservations.quiesce(reader, id);
  EXPECT_EQ(book.reservations.sleep(admin, by_name).reservation_id, id);
  worker.finish_jobs();
  EXPECT_EQ(code_of([&] { book.reservations.sleep(admin, by_name); }), errc::wrong_state);
  EXPECT_EQ(book.reservations.wake(admin, by_name.target).busy, 1u);
  worker.finish_jobs();
  EXPECT_EQ(book.reservations.status(admin, by_name.target).state, proto::reservation_state::awake);
}

}  // namespace
}  // namespace gpumem::daemon
