#include "books.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "gpumem/shared/sync/host_lock.hpp"
#include "gpumem/shared/unique_fd.hpp"
#include "memory/host_pool.hpp"
#include "request_error.hpp"
#include "restart/state_records.hpp"
#include "support/host_pools.hpp"

namespace gpumem::daemon {
namespace {

using proto::errc;

/// The code of the request_error @p work throws, or ok.
errc code_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const request_error& error) {
    return error.code();
  }
  return errc::ok;
}

class Books : public ::testing::Test {
 protected:
  static books make(bool across_users = false) {
    daemon_config config = embedded_default_config();
    config.access.default_mode = across_users ? 0666 : 0600;
    config.pools[0].size = 4 << 20;
    return books(config, host_pools);
  }
  static proto::allocate_request request(std::uint64_t size, std::string_view name = {}) {
    proto::allocate_request r{};
    r.size = size;
    r.device = proto::kHostDevice;
    EXPECT_FALSE(proto::make_wire_name(name, r.name));
    return r;
  }
  static proto::open_request open_request(std::string_view name) {
    proto::open_request r{};
    EXPECT_FALSE(proto::make_wire_name(name, r.name));
    return r;
  }
  static proto::release_request release_of(std::uint64_t id) { return {id, 0, 0, {}}; }
  std::uint64_t in_use() const { return book.stats().records.at(0).bytes_in_use; }

  books book = make();
  std::uint64_t owner = book.add_client({100, 1000, 1000, {}});
  std::uint64_t reader = book.add_client({101, 1000, 1000, {}});
};

TEST_F(Books, NamedAllocationIsSharedAndFreedWhenTheLastHolderLetsGo) {
  const auto made = book.memory.allocate(owner, request(5000, "frames"));
  const auto opened = book.memory.open(reader, open_request("frames"));
  EXPECT_EQ(made.alloc_id, opened.alloc_id);
  EXPECT_EQ(made.offset, opened.offset);
  EXPECT_EQ(in_use(), 5000u);
  book.memory.release(owner, release_of(made.alloc_id));
  EXPECT_EQ(in_use(), 5000u);
  EXPECT_EQ(book.memory.list_allocations(owner, 0).records.at(0).owner_client_id, 0u);
  // The name lives as long as the memory does.
  EXPECT_EQ(book.memory.open(owner, open_request("frames")).alloc_id, made.alloc_id);
  book.memory.release(owner, release_of(made.alloc_id));
  book.memory.release(reader, release_of(made.alloc_id));
  EXPECT_EQ(in_use(), 0u);
  EXPECT_EQ(code_of([&] { book.memory.open(reader, open_request("frames")); }), errc::not_found);
}

TEST_F(Books, RemovingAClientReleasesItsLedgerButNotWhatOthersHold) {
  const auto shared = book.memory.allocate(owner, request(4096, "shared"));
  book.memory.allocate(owner, request(8192));
  book.memory.open(reader, open_request("shared"));
  book.memory.open(reader, open_request("shared"));  // two references from one client
  book.remove_client(owner);
  EXPECT_EQ(in_use(), 4096u);
  book.memory.release(reader, release_of(shared.alloc_id));
  EXPECT_EQ(in_use(), 4096u);
  book.remove_client(reader);
  EXPECT_EQ(in_use(), 0u);
  EXPECT_EQ(book.stats().head.client_count, 0u);
}

TEST_F(Books, ADeathWalksTheClientsLedgerOnceThroughEveryBook) {
  const auto own = book.memory.allocate(owner, request(4096, "own"));
  const auto shared = book.memory.allocate(owner, request(4096, "shared"));
  book.memory.open(reader, open_request("shared"));
  proto::sync_open_request lock_request{};
  EXPECT_FALSE(proto::make_wire_name("guard", lock_request.name));
  lock_request.kind = proto::sync_kind::lock;
  const std::uint16_t owner_slot = book.sync.attach(owner).slot;
  const std::uint16_t reader_slot = book.sync.attach(reader).slot;
  const auto opened = book.sync.open(owner, lock_request).reply;
  book.sync.open(reader, lock_request);
  // The owner takes the lock through its page, as a client does.
  void* page = ::mmap(nullptr, sync::kHostPageSize, PROT_READ | PROT_WRITE, MAP_SHARED,
                      book.sync.page_for(owner, opened.page).fd(), 0);
  ASSERT_NE(page, MAP_FAILED);
  auto& cell = *reinterpret_cast<sync::lock_cell*>(
      static_cast<std::byte*>(page) + sync::index_of_cell(opened.cell) * sync::kCellSize);
  cell.domain = sync::domain_word(sync::domain::host);
  ASSERT_TRUE(sync::host_lock(cell, owner_slot).try_acquire());

  book.remove_client(owner);

  EXPECT_EQ(in_use(), 4096u) << "its own allocation is freed, the shared one stays";
  EXPECT_EQ(book.rows.find(own.alloc_id), nullptr);
  EXPECT_EQ(book.rows.find(shared.alloc_id)->owner, 0u);
  const auto next = sync::host_lock(cell, reader_slot).try_acquire();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, sync::acquire_status::acquired_owner_died);
  const auto listed = book.sync.list(reader, 0);
  ASSERT_EQ(listed.records.size(), 1u);
  EXPECT_EQ(listed.records[0].attached, 1u);
  EXPECT_EQ(listed.records[0].owner_deaths, 1u);
  EXPECT_EQ(book.sync.attach(book.add_client({102, 1000, 1000, {}})).slot, owner_slot)
      << "the dead client's slot is free again";
  sync::host_lock heir(cell, reader_slot);
  ASSERT_TRUE(heir.mark_consistent(next->hold));
  ASSERT_EQ(heir.release(next->hold), sync::release_status::released);
  book.remove_client(reader);
  EXPECT_EQ(book.rows.count(object_family::sync), 0u)
      << "a consistent lock goes with its last holder";
  EXPECT_EQ(in_use(), 0u);
  ::munmap(page, sync::kHostPageSize);
}

TEST_F(Books, EverySessionHasItsOwnTokenAndTheDaemonAnInstance) {
  const proto::session_token& first = book.rows.client(owner).token;
  const proto::session_token& second = book.rows.client(reader).token;
  EXPECT_FALSE(first.empty());
  EXPECT_FALSE(first.words[0] == second.words[0] && first.words[1] == second.words[1]);
  EXPECT_NE(book.instance, 0u);
  EXPECT_NE(make().instance, book.instance);
}

TEST_F(Books, AnUnservedSessionResumesForItsOwnProcessWithItsToken) {
  const auto made = book.memory.allocate(owner, request(4096, "kept"));
  const credentials who = book.rows.client(owner).who;
  const proto::session_token token = book.rows.client(owner).token;
  EXPECT_EQ(book.resume(owner, token, who), std::nullopt) << "a served session is not taken over";
  book.end_connection(owner);
  EXPECT_FALSE(book.rows.client(owner).serving);

  proto::session_token guessed = token;
  guessed.words[1] ^= 1;
  EXPECT_EQ(book.resume(owner, guessed, who), std::nullopt);
  credentials other_user = who;
  other_user.uid = 2000;
  EXPECT_EQ(book.resume(owner, token, other_user), std::nullopt);
  credentials other_process = who;
  other_process.pid = 999;
  EXPECT_EQ(book.resume(owner, token, other_process), std::nullopt);
  EXPECT_EQ(book.resume(reader + 100, token, who), std::nullopt) << "no such session";
  EXPECT_FALSE(book.rows.client(owner).serving) << "refusals change nothing";

  EXPECT_EQ(book.resume(owner, token, who), owner);
  EXPECT_TRUE(book.rows.client(owner).serving);
  EXPECT_EQ(book.resume(owner, token, who), std::nullopt) << "served again";
  // Host memory is let go when the connection ends (end_connection); the row and its counts
  // carry on.
  EXPECT_EQ(book.rows.find(made.alloc_id), nullptr);
  EXPECT_EQ(book.rows.usage_of_uid(1000).connections, 2u);
}

TEST_F(Books, ARemovedSessionCannotBeResumed) {
  const credentials who = book.rows.client(owner).who;
  const proto::session_token token = book.rows.client(owner).token;
  book.end_connection(owner);
  book.remove_client(owner);
  EXPECT_EQ(book.resume(owner, token, who), std::nullopt);
}

TEST_F(Books, BadRequestsAreClearErrorsThatChangeNothing) {
  book.memory.allocate(owner, request(4096, "taken"));
  const auto before = book.stats().records.at(0);
  EXPECT_EQ(code_of([&] { book.memory.allocate(reader, request(4096, "taken")); }),
            errc::already_exists);
  EXPECT_EQ(code_of([&] { book.memory.allocate(reader, request(8 << 20)); }), errc::out_of_memory);
  auto gpu = request(4096);
  gpu.device = 3;
  EXPECT_EQ(code_of([&] { book.memory.allocate(reader, gpu); }), errc::no_such_device);
  auto other_pool = request(4096);
  EXPECT_FALSE(proto::make_wire_name("nope", other_pool.pool));
  EXPECT_EQ(code_of([&] { book.memory.allocate(reader, other_pool); }), errc::not_found);
  EXPECT_EQ(code_of([&] { book.memory.release(reader, release_of(12345)); }), errc::not_found);
  EXPECT_EQ(code_of([&] { book.memory.open(reader, open_request("missing")); }), errc::not_found);
  EXPECT_EQ(code_of([&] { book.memory.pool_for(reader, 9); }), errc::not_found);
  const auto after = book.stats().records.at(0);
  EXPECT_EQ(before.bytes_in_use, after.bytes_in_use);
  EXPECT_EQ(before.allocations, after.allocations);
}

TEST_F(Books, AClientCannotReleaseWhatOnlyAnotherHolds) {
  const auto made = book.memory.allocate(owner, request(4096));
  EXPECT_EQ(code_of([&] { book.memory.release(reader, release_of(made.alloc_id)); }),
            errc::not_found);
  EXPECT_EQ(in_use(), 4096u);
}

TEST_F(Books, OpeningAnotherUsersAllocationNeedsTheSwitch) {
  const auto stranger = book.add_client({200, 2000, 2000, {}});
  const auto root = book.add_client({201, 0, 0, {}});
  book.memory.allocate(owner, request(4096, "private"));
  EXPECT_EQ(code_of([&] { book.memory.open(stranger, open_request("private")); }),
            errc::permission_denied);
  EXPECT_EQ(code_of([&] { book.memory.open(root, open_request("private")); }), errc::ok);
  books open_books = make(true);
  const auto a = open_books.add_client({1, 1000, 1000, {}});
  const auto b = open_books.add_client({2, 2000, 2000, {}});
  open_books.memory.allocate(a, request(4096, "private"));
  EXPECT_EQ(code_of([&] { open_books.memory.open(b, open_request("private")); }), errc::ok);
}

proto::sync_open_request lock_named(std::string_view name, std::uint32_t flags = 0) {
  proto::sync_open_request request{};
  EXPECT_FALSE(proto::make_wire_name(name, request.name));
  request.kind = proto::sync_kind::lock;
  request.flags = flags;
  return request;
}

// Issue 11, isolation of shared memory: sync state on pages per access class.
TEST_F(Books, EachAccessClassHasItsOwnLockPageAndOnlyItsUsersGetIt) {
  const auto stranger = book.add_client({200, 2000, 2000, {}});
  const auto root = book.add_client({201, 0, 0, {}});
  const std::uint32_t owners_page = book.sync.attach(owner).own_page.id();
  EXPECT_EQ(book.sync.attach(reader).own_page.id(), owners_page) << "one uid, one page";
  const std::uint32_t strangers_page = book.sync.attach(stranger).own_page.id();
  EXPECT_NE(strangers_page, owners_page);
  book.sync.attach(root);

  const auto mine = book.sync.open(owner, lock_named("private")).reply;
  EXPECT_EQ(mine.page, owners_page) << "made with the default mode: on the maker's own page";
  EXPECT_EQ(sync::page_of_cell(mine.cell), mine.page);
  EXPECT_EQ(code_of([&] { book.sync.page_for(stranger, owners_page); }), errc::not_found);
  EXPECT_EQ(code_of([&] { book.sync.page_for(stranger, 77); }), errc::not_found)
      << "a page that does not exist is refused alike";
  EXPECT_EQ(code_of([&] { book.sync.page_for(reader, owners_page); }), errc::ok);
  EXPECT_EQ(code_of([&] { book.sync.page_for(root, owners_page); }), errc::ok);
  EXPECT_EQ(book.sync.open(stranger, lock_named("theirs")).reply.page, strangers_page);
  EXPECT_EQ(code_of([&] { book.sync.page_for(owner, strangers_page); }), errc::not_found);

  const auto shared = book.sync.open(owner, lock_named("shared", proto::mode_flags(0666))).reply;
  EXPECT_NE(shared.page, owners_page);
  EXPECT_NE(shared.page, strangers_page);
  EXPECT_EQ(book.sync.open(stranger, lock_named("shared")).reply.page, shared.page);
  EXPECT_EQ(code_of([&] { book.sync.page_for(stranger, shared.page); }), errc::ok);
  // Read access is not use: a lock others may only read is as private as 0600.
  EXPECT_EQ(book.sync.open(owner, lock_named("readable", proto::mode_flags(0644))).reply.page,
            owners_page);

  // close_sync names a cell across pages.
  EXPECT_EQ(code_of([&] { book.sync.close(stranger, {mine.cell, 0}); }), errc::not_found);
  book.sync.close(stranger, {shared.cell, 0});
  book.sync.close(owner, {shared.cell, 0});
  EXPECT_EQ(code_of([&] { book.sync.page_for(owner, shared.page); }), errc::not_found)
      << "a page goes with its last object";
}

TEST_F(Books, AFullPageGivesItsClassAnotherPageThatOnlyItsUsersGet) {
  daemon_config config = embedded_default_config();
  config.quotas.per_uid.sync_objects = 3 * sync::kCellCount;
  books roomy(config, host_pools);
  const auto a = roomy.add_client({1, 1000, 1000, {}});
  const auto b = roomy.add_client({2, 2000, 2000, {}});
  const std::uint32_t own_page = roomy.sync.attach(a).own_page.id();
  roomy.sync.attach(b);
  for (std::uint32_t i = 0; i < sync::kCellCount; ++i) {
    EXPECT_EQ(roomy.sync.open(a, lock_named("lock." + std::to_string(i))).reply.page, own_page);
  }
  const auto more = roomy.sync.open(a, lock_named("one.more")).reply;
  EXPECT_NE(more.page, own_page);
  EXPECT_EQ(code_of([&] { roomy.sync.page_for(a, more.page); }), errc::ok);
  EXPECT_EQ(code_of([&] { roomy.sync.page_for(b, more.page); }), errc::not_found);
  EXPECT_EQ(roomy.sync.open(a, lock_named("and.another")).reply.page, more.page);
  EXPECT_NE(roomy.sync.open(b, lock_named("elsewhere")).reply.page, more.page);

  roomy.sync.close(a, {roomy.sync.open(a, lock_named("lock.7")).reply.cell, 0});
  roomy.sync.close(a, {sync::cell_id(own_page, 7), 0});
  EXPECT_EQ(roomy.sync.open(a, lock_named("refill")).reply.page, own_page)
      << "the lowest page with a free cell comes first";
  roomy.sync.close(a, {more.cell, 0});
  roomy.sync.close(a, {sync::cell_id(more.page, sync::index_of_cell(more.cell) + 1), 0});
  EXPECT_EQ(code_of([&] { roomy.sync.page_for(a, more.page); }), errc::not_found)
      << "a page goes with its last object";
}

// Issue 15: a page goes with open_sync's reply when asked, and only where the client has not
// mapped it: not its own page, not one it has another object open on.
TEST_F(Books, APageGoesWithAnOpenOnlyWhenAskedAndNotMappedAlready) {
  const std::uint32_t own_page = book.sync.attach(owner).own_page.id();
  book.sync.attach(reader);
  const std::uint32_t asked = proto::kFlagSendPage;
  const std::uint32_t group = proto::mode_flags(0660);
  EXPECT_EQ(book.sync.open(owner, lock_named("own", asked)).page_to_send, nullptr);
  const auto unasked = book.sync.open(owner, lock_named("unasked", group));
  EXPECT_EQ(unasked.page_to_send, nullptr);
  const auto first = book.sync.open(owner, lock_named("first", group | asked));
  EXPECT_NE(first.reply.page, own_page);
  EXPECT_EQ(first.reply.page, unasked.reply.page);
  EXPECT_EQ(first.page_to_send, nullptr) << "'unasked' is open on that page already";
  const auto theirs = book.sync.open(reader, lock_named("first", group | asked));
  ASSERT_NE(theirs.page_to_send, nullptr) << "another client's first object on that page";
  EXPECT_EQ(theirs.page_to_send->id(), first.reply.page);

  book.sync.close(owner, {unasked.reply.cell, 0});
  book.sync.close(owner, {first.reply.cell, 0});
  const auto again = book.sync.open(owner, lock_named("again", group | asked));
  EXPECT_EQ(again.reply.page, first.reply.page) << "the reader keeps the page";
  ASSERT_NE(again.page_to_send, nullptr) << "the client closed everything it had on that page";
  EXPECT_EQ(book.sync.open(owner, lock_named("again", group | asked)).page_to_send, nullptr)
      << "opened twice";
}

// A channel's slot layout is saved with its cell. A record from a daemon before layouts ends
// where the layout begins: it reads as a channel that keeps none (and so checks nobody).
TEST_F(Books, AChannelsLayoutIsSavedWithItsCellAndARecordWithoutOneReadsAsNone) {
  book.sync.attach(owner);
  proto::sync_open_request producer{};
  ASSERT_FALSE(proto::make_wire_name("ring", producer.name));
  producer.kind = proto::sync_kind::channel;
  producer.parties = 2;
  producer.role = proto::sync_role::producer;
  const proto::channel_layout layout{64, 2, 0};
  book.sync.open(owner, producer, &layout);
  const object_id id = *book.rows.find_name(object_family::sync, "ring");
  const restart::record_key key{restart::record_type::object, id};
  restart::record_writer body;
  ASSERT_TRUE(restart::encode(book, key, body));
  std::vector<std::byte> bytes = std::move(body).take();

  const auto saved = restart::decode({{key, bytes}}).objects.at(id).cell;
  ASSERT_TRUE(saved);
  EXPECT_EQ(saved->layout.slots, 2u);
  EXPECT_EQ(saved->layout.slot_bytes, 64u);
  bytes.resize(bytes.size() - sizeof(std::uint32_t) - sizeof(std::uint64_t));
  const auto earlier = restart::decode({{key, bytes}}).objects.at(id).cell;
  ASSERT_TRUE(earlier);
  EXPECT_EQ(earlier->layout.slots, 0u);
  EXPECT_EQ(earlier->parties, 2u);
  EXPECT_EQ(earlier->party_clients, std::vector<client_id>({owner, 0}));
}

TEST_F(Books, AKeptLockGivesWayBeforeItsClassGetsAnotherPage) {
  daemon_config config = embedded_default_config();
  config.quotas.per_uid.sync_objects = 3 * sync::kCellCount;
  books roomy(config, host_pools);
  const auto dying = roomy.add_client({1, 1000, 1000, {}});
  const std::uint16_t slot = roomy.sync.attach(dying).slot;
  const auto kept = roomy.sync.open(dying, lock_named("kept")).reply;
  void* page = ::mmap(nullptr, sync::kHostPageSize, PROT_READ | PROT_WRITE, MAP_SHARED,
                      roomy.sync.page_for(dying, kept.page).fd(), 0);
  ASSERT_NE(page, MAP_FAILED);
  auto& cell = *reinterpret_cast<sync::lock_cell*>(
      static_cast<std::byte*>(page) + sync::index_of_cell(kept.cell) * sync::kCellSize);
  cell.domain = sync::domain_word(sync::domain::host);
  ASSERT_TRUE(sync::host_lock(cell, slot).try_acquire());
  roomy.remove_client(dying);
  ::munmap(page, sync::kHostPageSize);
  ASSERT_TRUE(roomy.rows.find_name(object_family::sync, "kept")) << "its owner died holding it";

  const auto heir = roomy.add_client({2, 1000, 1000, {}});
  roomy.sync.attach(heir);
  for (std::uint32_t i = 1; i < sync::kCellCount; ++i) {
    EXPECT_EQ(roomy.sync.open(heir, lock_named("lock." + std::to_string(i))).reply.page, kept.page);
  }
  EXPECT_EQ(roomy.sync.open(heir, lock_named("in.its.cell")).reply.cell, kept.cell);
  EXPECT_FALSE(roomy.rows.find_name(object_family::sync, "kept"));
  EXPECT_NE(roomy.sync.open(heir, lock_named("on.a.new.page")).reply.page, kept.page);
}

TEST_F(Books, PageIdsAreReusedOnlyOnceAPageIsEmpty) {
  const auto stranger = book.add_client({200, 2000, 2000, {}});
  const std::uint32_t owners_page = book.sync.attach(owner).own_page.id();
  const auto shared = book.sync.open(owner, lock_named("shared", proto::mode_flags(0666))).reply;
  book.remove_client(owner);
  EXPECT_EQ(code_of([&] { book.sync.page_for(stranger, shared.page); }), errc::not_found);
  // The lowest free id again, now for another class.
  EXPECT_EQ(book.sync.attach(stranger).own_page.id(), owners_page);
  EXPECT_EQ(book.sync.open(stranger, lock_named("theirs")).reply.page, owners_page);
}

TEST_F(Books, ListsPageThroughEverything) {
  for (std::size_t i = 0; i < memory_book::kPageSize + 10; ++i)
    book.memory.allocate(owner, request(1));
  const auto first = book.memory.list_allocations(owner, 0);
  EXPECT_EQ(first.records.size(), memory_book::kPageSize);
  EXPECT_EQ(first.head.more, 1u);
  const auto second = book.memory.list_allocations(owner, first.records.back().alloc_id);
  EXPECT_EQ(second.records.size(), 10u);
  EXPECT_EQ(second.head.more, 0u);
  const auto clients = book.list_clients(owner, 0);
  ASSERT_EQ(clients.records.size(), 2u);
  EXPECT_EQ(clients.records[0].allocations_owned, memory_book::kPageSize + 10);
  EXPECT_EQ(clients.records[0].bytes_owned, memory_book::kPageSize + 10);
}

TEST_F(Books, StatsKeepAHighWaterMarkAndCountRounding) {
  const auto a = book.memory.allocate(owner, request(100));
  book.memory.allocate(owner, request(5000));
  book.memory.release(owner, release_of(a.alloc_id));
  const auto pool = book.stats().records.at(0);
  EXPECT_EQ(pool.bytes_in_use, 5000u);
  EXPECT_EQ(pool.bytes_in_use_high, 5100u);
  EXPECT_EQ(pool.bytes_reserved, 8192u);
  EXPECT_EQ(pool.allocations, 1u);
}

TEST_F(Books, AReleasedHostRangesPagesAreGoneOnceTheChangesAreWritten) {
  const auto made = book.memory.allocate(owner, request(3 * 4096));
  const auto [home, fd] = book.memory.pool_for(owner, made.pool_id);
  ASSERT_NE(home, nullptr);
  void* mapped = ::mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                        static_cast<off_t>(made.offset));
  ASSERT_NE(mapped, MAP_FAILED);
  std::memset(mapped, 0x5a, 3 * 4096);
  book.memory.release(owner, release_of(made.alloc_id));
  // The loop writes the changes down once per turn, before the replies of that turn go out:
  // the client told its range is free finds its pages gone.
  book.write_changes();
  EXPECT_EQ(::lseek(fd, static_cast<off_t>(made.offset), SEEK_DATA), -1);
  EXPECT_EQ(errno, ENXIO);
  EXPECT_EQ(static_cast<unsigned char*>(mapped)[0], 0);
  ::munmap(mapped, 3 * 4096);
  // And the range is placed again.
  EXPECT_EQ(book.memory.allocate(owner, request(3 * 4096)).offset, made.offset);
}

}  // namespace
}  // namespace gpumem::daemon

namespace gpumem::daemon {
namespace {

// Chunks of 2 MiB whose descriptors are /dev/null; counts how many reservations live.
class fake_reservation final : public reservation {
 public:
  explicit fake_reservation(std::uint64_t max_size, int& live) : max_size_(max_size), live_(live) {
    ++live_;
  }
  ~fake_reservation() override { --live_; }
  std::uint64_t chunk_size() const noexcept override { return 2 << 20; }
  std::uint64_t max_size() const noexcept override { return max_size_; }
  std::int32_t device() const noexcept override { return 0; }
  std::size_t chunk_count() const noexcept override { return chunks_.size(); }
  chunk chunk_at(std::size_t index) const override {
    return {chunks_.at(index).first, chunks_.at(index).second.get(),
            chunks_.at(index).second.get()};
  }
  // Sleep and wake are tested on the host backend (reservation_book_test.cpp).
  void copy_out(gpumem::daemon::sleep_copy&) const override {
    throw std::logic_error("not used here");
  }
  void copy_in(gpumem::daemon::sleep_copy&) override { throw std::logic_error("not used here"); }
  void clear() override { throw std::logic_error("not used here"); }
  void resize(std::size_t chunks) override {
    if (chunks * chunk_size() > (std::uint64_t{1} << 30)) {
      throw request_error(proto::errc::out_of_memory, "fake device full");
    }
    while (chunks_.size() < chunks)
      chunks_.emplace_back(next_id_++, unique_fd(::open("/dev/null", O_RDONLY)));
    chunks_.resize(chunks);
  }

 private:
  std::uint64_t max_size_;
  int& live_;
  std::uint64_t next_id_ = 1;
  std::vector<std::pair<std::uint64_t, unique_fd>> chunks_;
};

class Reservations : public ::testing::Test {
 protected:
  static proto::reserve_request request(std::uint64_t max, std::uint64_t initial,
                                        std::string_view name = {}) {
    proto::reserve_request r{max, initial, 0, 0, {}};
    EXPECT_FALSE(proto::make_wire_name(name, r.name));
    return r;
  }
  static proto::open_request open_request(std::string_view name) {
    proto::open_request r{};
    EXPECT_FALSE(proto::make_wire_name(name, r.name));
    r.access = proto::access_mode::read_only;
    return r;
  }

  int live = 0;
  daemon_config config = embedded_default_config();
  std::vector<std::uint64_t> asked_chunk_sizes;  ///< what the book asked the maker for
  books book{config, host_pools, [this](std::int32_t, std::uint64_t max, std::uint64_t chunk) {
               asked_chunk_sizes.push_back(chunk);
               return std::make_unique<fake_reservation>(max, live);
             }};
  std::uint64_t owner = book.add_client({100, 1000, 1000, {}});
  std::uint64_t reader = book.add_client({101, 1000, 1000, {}});
};

TEST_F(Reservations, ASharedReservationGrowsShrinksAndGoesWithItsLastHolder) {
  const auto made = book.reservations.reserve(owner, request(64 << 20, 3 << 20, "kv"));
  EXPECT_EQ(made.committed, 4u << 20) << "rounded up to whole chunks";
  const auto opened = book.reservations.open(reader, open_request("kv"));
  EXPECT_EQ(opened.reservation_id, made.reservation_id);
  EXPECT_EQ(opened.access, proto::access_mode::read_only);
  EXPECT_EQ(book.reservations.resize(owner, {made.reservation_id, 10 << 20}).committed, 10u << 20);
  const auto listed = book.reservations.list(owner, 0);
  ASSERT_EQ(listed.records.size(), 1u);
  EXPECT_EQ(listed.records[0].committed, 10u << 20);
  EXPECT_EQ(listed.records[0].holders, 2u);
  EXPECT_EQ(listed.records[0].name.view(), "kv");
  std::vector<int> fds;
  const auto page =
      book.reservations.chunks(reader, {made.reservation_id, 0, proto::chunk_set::current, 0}, fds);
  ASSERT_EQ(page.records.size(), 5u);
  EXPECT_EQ(fds.size(), 5u);
  EXPECT_EQ(page.head.committed_chunks, 5u);
  EXPECT_EQ(book.reservations.resize(owner, {made.reservation_id, 2 << 20}).committed, 2u << 20);
  book.remove_client(owner);
  EXPECT_EQ(live, 1) << "the reader still holds it";
  book.reservations.release(reader, made.reservation_id);
  EXPECT_EQ(live, 0);
  EXPECT_EQ(code_of([&] { book.reservations.open(reader, open_request("kv")); }), errc::not_found);
}

// A restarted daemon of a later release may cut new reservations into other chunks; holders map
// a reservation's chunks at multiples of the size it started with.
TEST_F(Reservations, ANewVersionIsMadeOfChunksOfTheFirstVersionsSize) {
  const auto made = book.reservations.reserve(owner, request(64 << 20, 2 << 20, "kv"));
  book.reservations.begin_version(owner, {made.reservation_id, 4 << 20});
  EXPECT_EQ(asked_chunk_sizes, (std::vector<std::uint64_t>{0, 2 << 20}));
}

TEST_F(Reservations, QuotasChargeTheWholeChunksThatAreCommitted) {
  quota_config limited;
  limited.per_uid.bytes = 5 << 20;
  book.quotas = quota_policy(limited);
  const auto made = book.reservations.reserve(owner, request(64 << 20, 1, "kv"));
  EXPECT_EQ(made.committed, 2u << 20);
  // 4 MiB and a byte are three chunks: 6 MiB against 5.
  const auto resized = [&] {
    book.reservations.resize(owner, {made.reservation_id, (4 << 20) + 1});
  };
  EXPECT_EQ(code_of(resized), errc::quota_exceeded);
  EXPECT_EQ(code_of([&] {
              book.reservations.begin_version(owner, {made.reservation_id, (2 << 20) + 1});
            }),
            errc::quota_exceeded)
      << "a 4 MiB draft beside the 2 MiB version";
  EXPECT_EQ(
      code_of([&] { book.reservations.reserve(owner, request(64 << 20, (2 << 20) + 1, "more")); }),
      errc::quota_exceeded);
}

TEST_F(Reservations, OnlyTheOwnerResizesAndBadRequestsChangeNothing) {
  const auto made = book.reservations.reserve(owner, request(8 << 20, 2 << 20, "only-mine"));
  book.reservations.open(reader, open_request("only-mine"));
  EXPECT_EQ(code_of([&] {
              book.reservations.resize(reader, {made.reservation_id, 4 << 20});
            }),
            errc::permission_denied);
  EXPECT_EQ(code_of([&] {
              book.reservations.resize(owner, {made.reservation_id, 16 << 20});
            }),
            errc::invalid_argument);
  EXPECT_EQ(code_of([&] { book.reservations.reserve(reader, request(8 << 20, 0, "only-mine")); }),
            errc::already_exists);
  EXPECT_EQ(code_of([&] { book.reservations.reserve(reader, request(4ull << 30, 2ull << 30)); }),
            errc::out_of_memory);
  const auto stranger = book.add_client({102, 1000, 1000, {}});
  std::vector<int> fds;
  EXPECT_EQ(code_of([&] {
              book.reservations.chunks(stranger,
                                       {made.reservation_id, 0, proto::chunk_set::current, 0}, fds);
            }),
            errc::not_found);
  EXPECT_EQ(code_of([&] { book.reservations.release(stranger, made.reservation_id); }),
            errc::not_found);
  EXPECT_EQ(live, 1);
  book.remove_client(owner);
  EXPECT_EQ(code_of([&] {
              book.reservations.resize(reader, {made.reservation_id, 2 << 20});
            }),
            errc::permission_denied)
      << "nobody resizes once the owner is gone";
}

TEST_F(Reservations, ChunkPagesStopAtTheDescriptorLimit) {
  const auto made = book.reservations.reserve(owner, request(600 << 20, 600 << 20));  // 300 chunks
  std::vector<int> fds;
  const auto first =
      book.reservations.chunks(owner, {made.reservation_id, 0, proto::chunk_set::current, 0}, fds);
  EXPECT_EQ(first.records.size(), proto::kMaxFdsPerMessage);
  EXPECT_EQ(fds.size(), proto::kMaxFdsPerMessage);
  EXPECT_EQ(first.head.more, 1u);
  fds.clear();
  const auto second = book.reservations.chunks(owner,
                                               {made.reservation_id, proto::kMaxFdsPerMessage,
                                                proto::chunk_set::current, first.head.version},
                                               fds);
  EXPECT_EQ(second.records.size(), 300u - proto::kMaxFdsPerMessage);
  EXPECT_EQ(second.records.front().index, proto::kMaxFdsPerMessage);
  EXPECT_EQ(second.head.more, 0u);
}

TEST(ReservationsWithoutCuda, AreRefusedClearly) {
  books book(embedded_default_config(), host_pools);
  const auto client = book.add_client({1, 1, 1, {}});
  proto::reserve_request r{1 << 20, 0, 0, 0, {}};
  try {
    book.reservations.reserve(client, r);
    ADD_FAILURE() << "no error";
  } catch (const request_error& error) {
    EXPECT_EQ(error.code(), errc::not_supported);
  }
}

}  // namespace
}  // namespace gpumem::daemon

namespace gpumem::daemon {
namespace {

/// Books with quotas and two uids, 1000 (the owner, group 1000) and 2000 (group 1000 too when
/// @p same_group), plus root.
class Tenants : public ::testing::Test {
 protected:
  static daemon_config quota_config() {
    daemon_config config = embedded_default_config();
    config.pools[0].size = 4 << 20;
    config.quotas.uids[1000] = {
        .bytes = 8192, .allocations = 3, .sync_objects = 1, .connections = {}};
    return config;
  }
  static proto::allocate_request request(std::uint64_t size, std::string_view name = {},
                                         std::optional<unsigned> mode = {}) {
    proto::allocate_request r{};
    r.size = size;
    r.device = proto::kHostDevice;
    r.flags = mode ? proto::mode_flags(*mode) : 0;
    EXPECT_FALSE(proto::make_wire_name(name, r.name));
    return r;
  }
  static proto::open_request open_request(std::string_view name, proto::access_mode access) {
    proto::open_request r{};
    EXPECT_FALSE(proto::make_wire_name(name, r.name));
    r.access = access;
    return r;
  }
  static std::string message_of(const std::function<void()>& work) {
    try {
      work();
    } catch (const request_error& error) {
      return error.what();
    }
    return "";
  }

  daemon_config config = quota_config();
  books book{config, host_pools};
  client_id owner = book.add_client({100, 1000, 1000, {}});
  client_id colleague = book.add_client({101, 2000, 2000, {1000}});
  client_id stranger = book.add_client({102, 3000, 3000, {}});
  client_id root = book.add_client({103, 0, 0, {}});
};

TEST_F(Tenants, QuotasRefuseNamingTheKeyAndGiveBackWhatIsFreed) {
  const auto first = book.memory.allocate(owner, request(4096));
  book.memory.allocate(owner, request(4096));
  const std::string refusal = message_of([&] { book.memory.allocate(owner, request(1)); });
  EXPECT_NE(refusal.find("quotas.uid:1000.bytes"), std::string::npos) << refusal;
  EXPECT_EQ(code_of([&] { book.memory.allocate(owner, request(1)); }), errc::quota_exceeded);
  EXPECT_EQ(code_of([&] { book.memory.allocate(stranger, request(1 << 20)); }), errc::ok)
      << "another uid is held to the default, not to uid 1000's quota";
  book.memory.release(owner, {first.alloc_id, 0, 0, {}});
  EXPECT_EQ(code_of([&] { book.memory.allocate(owner, request(4096)); }), errc::ok);
  EXPECT_EQ(code_of([&] { book.memory.allocate(owner, request(1)); }), errc::quota_exceeded);

  book.sync.attach(owner);
  proto::sync_open_request lock{};
  lock.kind = proto::sync_kind::lock;
  EXPECT_FALSE(proto::make_wire_name("one", lock.name));
  EXPECT_EQ(code_of([&] { book.sync.open(owner, lock); }), errc::ok);
  EXPECT_FALSE(proto::make_wire_name("two", lock.name));
  EXPECT_EQ(code_of([&] { book.sync.open(owner, lock); }), errc::quota_exceeded);
}

TEST_F(Tenants, ModesDecideWhoOpensAndWhichDescriptorTheyGet) {
  const auto made = book.memory.allocate(owner, request(4096, "shared", 0640));
  EXPECT_EQ(code_of([&] {
              book.memory.open(colleague, open_request("shared", proto::access_mode::read_only));
            }),
            errc::ok);
  const std::string refusal = message_of(
      [&] { book.memory.open(colleague, open_request("shared", proto::access_mode::read_write)); });
  EXPECT_NE(refusal.find("allocation 'shared'"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("owner uid 1000"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("uid 2000"), std::string::npos) << refusal;
  EXPECT_EQ(code_of([&] {
              book.memory.open(stranger, open_request("shared", proto::access_mode::read_only));
            }),
            errc::permission_denied);
  EXPECT_EQ(code_of([&] {
              book.memory.open(root, open_request("shared", proto::access_mode::read_write));
            }),
            errc::ok);

  // The group reader gets the instance read-only, the stranger not at all.
  const auto [instance, reader_fd] = book.memory.pool_for(colleague, made.pool_id);
  EXPECT_EQ(::fcntl(reader_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, reader_fd, 0), MAP_FAILED);
  EXPECT_EQ(::fcntl(book.memory.pool_for(owner, made.pool_id).second, F_GETFL) & O_ACCMODE, O_RDWR);
  EXPECT_EQ(code_of([&] { book.memory.pool_for(stranger, made.pool_id); }), errc::not_found);

  // A private allocation of the same owner lives in another instance.
  const auto own = book.memory.allocate(owner, request(4096, "private"));
  EXPECT_NE(own.pool_id, made.pool_id);
  EXPECT_EQ(code_of([&] { book.memory.pool_for(colleague, own.pool_id); }), errc::not_found);
}

TEST_F(Tenants, AModeThatGivesOthersWhatItRefusesTheGroupKeepsTheGroupOut) {
  const auto made = book.memory.allocate(owner, request(4096, "not-the-group", 0606));
  EXPECT_EQ(code_of([&] { book.memory.pool_for(colleague, made.pool_id); }), errc::not_found);
  EXPECT_EQ(code_of([&] { book.memory.pool_for(stranger, made.pool_id); }), errc::ok);
}

TEST_F(Tenants, ListsShowWhatTheAskerMaySee) {
  book.memory.allocate(owner, request(4096, "mine"));
  book.memory.allocate(owner, request(4096, "ours", 0640));
  EXPECT_EQ(book.memory.list_allocations(owner, 0).records.size(), 2u);
  EXPECT_EQ(book.memory.list_allocations(colleague, 0).records.size(), 1u);
  EXPECT_EQ(book.memory.list_allocations(stranger, 0).records.size(), 0u);
  EXPECT_EQ(book.memory.list_allocations(root, 0).records.size(), 2u);
  const auto seen = book.list_clients(stranger, 0);
  ASSERT_EQ(seen.records.size(), 1u);
  EXPECT_EQ(seen.records[0].uid, 3000u);
  EXPECT_EQ(book.list_clients(root, 0).records.size(), 4u);

  const auto own_usage = book.list_usage(owner, 0);
  ASSERT_EQ(own_usage.records.size(), 1u);
  EXPECT_EQ(own_usage.records[0].host_bytes, 8192u);
  EXPECT_EQ(own_usage.records[0].bytes_limit, 8192u);
  EXPECT_EQ(own_usage.records[0].memory_objects_limit, 3u);
  EXPECT_EQ(book.list_usage(root, 0).records.size(), 4u) << "an administrator sees every uid";
}

TEST_F(Tenants, OnlyTheOwnerUidOrAnAdministratorResets) {
  book.sync.attach(owner);
  book.sync.attach(colleague);
  proto::sync_open_request lock{};
  lock.kind = proto::sync_kind::lock;
  lock.flags = proto::mode_flags(0660);
  EXPECT_FALSE(proto::make_wire_name("ours", lock.name));
  book.sync.open(owner, lock);
  EXPECT_EQ(code_of([&] { book.sync.open(colleague, lock); }), errc::ok) << "group rw";
  proto::sync_reset_request reset{};
  EXPECT_FALSE(proto::make_wire_name("ours", reset.name));
  EXPECT_EQ(code_of([&] { book.sync.reset(colleague, reset); }), errc::permission_denied);
  EXPECT_EQ(code_of([&] { book.sync.reset(stranger, reset); }), errc::permission_denied);
  EXPECT_EQ(code_of([&] { book.sync.reset(root, reset); }), errc::ok);
  EXPECT_EQ(code_of([&] { book.sync.reset(owner, reset); }), errc::ok);
  book.sync.attach(stranger);
  EXPECT_EQ(code_of([&] { book.sync.open(stranger, lock); }), errc::permission_denied);
}

TEST_F(Tenants, ConnectionsNeedThePolicyAndFitTheirQuota) {
  EXPECT_EQ(code_of([&] { book.check_connection(stranger); }), errc::permission_denied)
      << "uid 3000 is neither root, the daemon's user, in its group nor listed";
  EXPECT_EQ(code_of([&] { book.check_connection(root); }), errc::ok);
}

// A pool on a host_pool's memory, for the test pools below that each add one behaviour to it.
class pool_on_host : public pool {
 public:
  pool_on_host(std::uint32_t id, const pool_config& config)
      : pool(id, config), backing_(id, config) {}

  int shareable_fd() const noexcept override { return backing_.shareable_fd(); }
  grant_details grant_of(const placement& where) const override { return backing_.grant_of(where); }

 protected:
  std::optional<placement> do_allocate(std::uint64_t size) override {
    return backing_.allocate(size);
  }
  void do_free(const placement& where, std::uint64_t size) noexcept override {
    backing_.free(where, size);
  }
  bool do_adopt(const placement&, std::uint64_t, const grant_details&) override { return false; }
  std::uint64_t largest_possible() const noexcept override { return 0; }

 private:
  host_pool backing_;
};

// A host pool that keeps one 64 KiB spare block in its configured pool's room from the moment
// it is made, as a CUDA pool's spares do after its allocations; a 64 KiB allocation takes it.
class pool_keeping_a_spare final : public pool_on_host {
 public:
  static constexpr std::uint64_t kSpare = 64 << 10;

  pool_keeping_a_spare(std::uint32_t id, const pool_config& config, family_room& room)
      : pool_on_host(id, config), room_(room) {
    if (room_.hold_spare(kSpare)) kept_ = kSpare;
  }
  ~pool_keeping_a_spare() override { room_.release_spare(kept_); }

  spare_use spares() const override {
    return {.bytes = kept_, .ready_bytes = kept_, .served = served_};
  }
  bool has_spare(std::uint64_t size) const override { return size == kept_; }
  void drop_spares() noexcept override { room_.release_spare(std::exchange(kept_, 0)); }

 private:
  std::optional<placement> do_allocate(std::uint64_t size) override {
    if (size == kept_) {  // the spare turns into the allocation
      drop_spares();
      ++served_;
    }
    return pool_on_host::do_allocate(size);
  }

  family_room& room_;
  std::uint64_t kept_ = 0;
  std::uint64_t served_ = 0;
};

TEST(PoolRoom, SparesAreMadeInTheRoomLeftAndGiveWayOnlyToTheirOwnTenantsAllocations) {
  daemon_config config = embedded_default_config();
  config.pools[0].size = 1 << 20;
  books book(config, [](std::uint32_t id, const pool_config& settings, family_room& room) {
    return std::make_unique<pool_keeping_a_spare>(id, settings, room);
  });
  const auto spare_bytes = [&] { return book.memory.spares().at(0).second.bytes; };
  const auto request = [](std::uint64_t size) {
    proto::allocate_request r{};
    r.size = size;
    r.device = proto::kHostDevice;
    return r;
  };
  const auto in_use = [&] { return book.stats().records.at(0).bytes_in_use; };
  constexpr std::uint64_t kSpare = pool_keeping_a_spare::kSpare;
  // Uids other than this process's, whose instance the daemon made for itself.
  const std::uint32_t uid = ::geteuid() + 1000;
  const client_id first = book.add_client({100, uid, uid, {}});
  const client_id second = book.add_client({101, uid + 1000, uid + 1000, {}});
  ASSERT_EQ(spare_bytes(), kSpare) << "the daemon's own instance keeps one";

  book.memory.allocate(first, request(512 << 10));
  EXPECT_EQ(spare_bytes(), 2 * kSpare) << "the first tenant's instance made one in the room left";

  // 1 MiB - 512 KiB - 3 spares leaves 320 KiB: the second tenant's 448 KiB drop its own
  // instance's spare, not the others', and are not refused for them.
  book.memory.allocate(second, request(448 << 10));
  EXPECT_EQ(in_use(), 960u << 10);
  EXPECT_EQ(spare_bytes(), 2 * kSpare);

  // The first tenant's spare serves its own 64 KiB allocation: taken, not dropped.
  book.memory.allocate(first, request(kSpare));
  EXPECT_EQ(in_use(), 1u << 20);
  EXPECT_EQ(spare_bytes(), kSpare);
  EXPECT_EQ(book.memory.spares().at(0).second.served, 1u);
}

// A pool that only the previous daemon's state names, taken out of the configuration or on a
// device that is gone, must not stop the restart (a crash loop): nothing is made for it at the
// start, it takes no new allocation, and its instance closes once it holds nothing.
TEST(UnconfiguredPools, AreNotMadeAtTheStartTakeNothingNewAndCloseOnceEmpty) {
  pool_config gone = embedded_default_config().pools.at(0);
  gone.name = "gone";
  gone.device = 3;
  const auto no_cuda = [](std::uint32_t id, const pool_config& settings,
                          family_room& room) -> std::unique_ptr<pool> {
    if (settings.device != proto::kHostDevice) {
      throw std::runtime_error("no CUDA device " + std::to_string(settings.device));
    }
    return host_pools(id, settings, room);
  };
  constexpr std::uint32_t kAdoptedId = 7;
  const auto adopt = [&](books& state) {
    state.memory.adopt_pool(std::make_unique<host_pool>(kAdoptedId, gone),
                            access_class::for_memory(1000, 1000, 0600));
  };
  std::optional<books> book;
  ASSERT_NO_THROW(book.emplace(embedded_default_config(), no_cuda, reservation_maker{},
                               signal_page_maker{}, adopt));
  EXPECT_EQ(book->memory.pool_by_id(kAdoptedId), nullptr) << "held nothing: closed at the start";

  const client_id client = book->add_client({100, 1000, 1000, {}});
  proto::allocate_request named{};
  named.size = 4096;
  named.device = 3;
  ASSERT_FALSE(proto::make_wire_name("gone", named.pool));
  try {
    book->memory.allocate(client, named);
    ADD_FAILURE() << "allocated from a pool that is no longer configured";
  } catch (const request_error& error) {
    EXPECT_EQ(error.code(), errc::not_found);
    EXPECT_NE(std::string(error.what()).find("pool 'gone' is no longer configured"),
              std::string::npos)
        << error.what();
  }
  proto::allocate_request unnamed = named;
  unnamed.pool = {};
  EXPECT_EQ(code_of([&] { book->memory.allocate(client, unnamed); }), errc::no_such_device);
}

// A reload that configures such a pool again gives it allocations again: with any settings once
// it holds nothing (while it holds memory, only as it was). An instance kept with settings other
// than its configured pool's (a host pool's size changed across the restart) takes no new
// allocation.
TEST(UnconfiguredPools, AreConfiguredAgainByAReloadAndKeptInstancesOfOtherSettingsRetire) {
  pool_config gone = embedded_default_config().pools.at(0);
  gone.name = "gone";
  pool_config resized = embedded_default_config().pools.at(0);
  resized.size *= 2;
  const access_class tenant = access_class::for_memory(1000, 1000, 0600);
  books book(embedded_default_config(), host_pools, {}, {}, [&](books& state) {
    state.memory.adopt_pool(std::make_unique<host_pool>(7, gone), tenant);
    state.memory.adopt_pool(std::make_unique<host_pool>(8, resized), tenant);
  });
  EXPECT_EQ(book.memory.pool_by_id(8), nullptr) << "not the configured size: closed, empty";
  EXPECT_EQ(book.stats().records.size(), 1u) << "'gone' holds nothing: not listed";

  // It held nothing: configured again with any settings. (One that still holds memory takes
  // other settings only at a restart: Restart.APoolTakenOutOfTheConfiguration...)
  pool_config other = gone;
  other.size /= 2;
  book.memory.add_pool(other);
  const client_id client = book.add_client({100, 1000, 1000, {}});
  proto::allocate_request request{};
  request.size = 4096;
  request.device = proto::kHostDevice;
  ASSERT_FALSE(proto::make_wire_name("gone", request.pool));
  EXPECT_NO_THROW(book.memory.allocate(client, request));
  ASSERT_EQ(book.stats().records.size(), 2u);
  EXPECT_EQ(book.stats().records.at(1).size_limit, other.size);
}

/// A keeper whose store holds as many descriptors as a test says.
class counted_keeper final : public state_keeper {
 public:
  std::size_t stored = 0;
  void keep_process(client_id, int) override {}
  void write_changes() noexcept override {}
  bool failing() const noexcept override { return false; }
  std::uint64_t failed_writes() const noexcept override { return 0; }
  std::size_t stored_descriptors() const noexcept override { return stored; }
};

/// The text of the request_error @p work throws, or "not refused".
std::string refusal_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const request_error& error) {
    EXPECT_EQ(error.code(), errc::quota_exceeded) << error.what();
    return error.what();
  }
  return "not refused";
}

// Whatever a tenant's request makes that the fd store keeps must fit in it: a pool instance and
// a lock page of a new access class as much as a reservation's chunks, or a tenant could fill
// the store until systemd drops the daemon's own state files.
TEST(DescriptorBudget, EveryDescriptorARequestMakesMustFitTheStore) {
  daemon_config config = embedded_default_config();
  config.fd_store_max = 1000;
  config.max_connections = 8;
  books book(config, host_pools);
  counted_keeper keeper;
  book.set_keeper(&keeper);
  const std::uint32_t uid = ::geteuid() + 1000;  // a class of its own: a new instance, a new page
  const client_id client = book.add_client({100, uid, uid, {}});
  keeper.stored = 1000 - (8 - 1) - 256;  // full: one connection open, 7 more allowed
  proto::allocate_request allocation{};
  allocation.size = 4096;
  allocation.device = proto::kHostDevice;
  const std::string instance = refusal_of([&] { book.memory.allocate(client, allocation); });
  EXPECT_NE(instance.find("pool 'host' (an instance for uid " + std::to_string(uid) +
                          "): 1 more descriptors would pass fd_store_max (737 of 1000 kept, 7 + "
                          "256 held back"),
            std::string::npos)
      << instance;
  EXPECT_NE(refusal_of([&] { book.sync.attach(client); }).find("a lock and barrier page"),
            std::string::npos);

  keeper.stored -= 2;  // room for two: what is answered before the next write counts
  EXPECT_NO_THROW(book.memory.allocate(client, allocation));
  EXPECT_NO_THROW(book.sync.attach(client));
  const client_id other = book.add_client({101, uid + 1, uid + 1, {}});  // 6 more connections
  keeper.stored += 1;
  EXPECT_NE(refusal_of([&] { book.memory.allocate(other, allocation); }).find("738 of 1000"),
            std::string::npos);

  // Past the store's size systemd drops descriptors without a word: not kept, says the daemon.
  EXPECT_TRUE(book.state_kept());
  keeper.stored = 1001;
  EXPECT_FALSE(book.state_kept());
}

/// What the pools of one books heard about their holders, in order.
struct holder_log {
  std::vector<std::pair<std::uint64_t, bool>> released;  ///< holder, with an event
  std::vector<std::uint64_t> forgotten;
};

// A host pool that records the releases its holders mark with an event and when it is told to
// forget a holder, as a CUDA pool keeps and then destroys each holder's opened event.
class pool_recording_holders final : public pool_on_host {
 public:
  pool_recording_holders(std::uint32_t id, const pool_config& config, holder_log& log)
      : pool_on_host(id, config), log_(log) {}

  void holder_released(std::uint64_t holder, const placement&,
                       const std::optional<ipc_handle>& released_event) override {
    log_.released.emplace_back(holder, released_event.has_value());
  }
  void forget_holder(std::uint64_t holder) noexcept override { log_.forgotten.push_back(holder); }

 private:
  holder_log& log_;
};

class HolderForgetting : public ::testing::Test {
 protected:
  static proto::allocate_request request() {
    proto::allocate_request r{};
    r.size = 4096;
    r.device = proto::kHostDevice;
    return r;
  }
  /// Allocates for @p client and releases it, with a release event or without.
  void allocate_and_release(client_id client, bool with_event) {
    const auto made = book.memory.allocate(client, request());
    proto::release_request release{made.alloc_id, 0, 0, {}};
    if (with_event) {
      release.flags = proto::kReleaseHasEvent;
      release.released_event[5] = 0x42;
    }
    book.memory.release(client, release);
  }

  holder_log log;
  books book{embedded_default_config(),
             [this](std::uint32_t id, const pool_config& settings, family_room&) {
               return std::make_unique<pool_recording_holders>(id, settings, log);
             }};
  client_id marking = book.add_client({100, 1000, 1000, {}});
  client_id plain = book.add_client({101, 1000, 1000, {}});
};

TEST_F(HolderForgetting, AClientThatDiesIsForgottenByThePoolsItReleasedIntoWithAnEvent) {
  allocate_and_release(marking, true);
  allocate_and_release(plain, false);
  ASSERT_EQ(log.released.size(), 2u);
  book.depart(marking, true);
  EXPECT_EQ(log.forgotten, std::vector<std::uint64_t>{marking});
  book.depart(plain, true);
  EXPECT_EQ(log.forgotten, std::vector<std::uint64_t>{marking})
      << "a client that sent no release event has nothing to forget";
}

TEST_F(HolderForgetting, AConnectionThatEndsIsForgottenAndAResumedSessionAgainAtItsNextEnd) {
  allocate_and_release(marking, true);
  const credentials who = book.rows.client(marking).who;
  const proto::session_token token = book.rows.client(marking).token;
  book.end_connection(marking);
  EXPECT_EQ(log.forgotten, std::vector<std::uint64_t>{marking})
      << "its event may be destroyed before it resumes";
  ASSERT_EQ(book.resume(marking, token, who), marking);
  book.depart(marking, false);
  EXPECT_EQ(log.forgotten, std::vector<std::uint64_t>{marking})
      << "no release since it resumed: nothing kept to forget again";

  const client_id second = book.add_client({102, 1000, 1000, {}});
  allocate_and_release(second, true);
  const proto::session_token second_token = book.rows.client(second).token;
  book.end_connection(second);
  ASSERT_EQ(book.resume(second, second_token, book.rows.client(second).who), second);
  allocate_and_release(second, true);
  book.depart(second, true);
  EXPECT_EQ(log.forgotten, (std::vector<std::uint64_t>{marking, second, second}))
      << "released into again after it resumed, then forgotten again when it went";
}

}  // namespace
}  // namespace gpumem::daemon
