#include "ledger/ledger.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "request_error.hpp"

namespace gpumem::daemon {
namespace {

class Ledger : public ::testing::Test {
 protected:
  ledger rows;
  client_id alice = rows.add_client({10, 1000, 1000, {}}, {});
  client_id alice_too = rows.add_client({11, 1000, 1000, {}}, {});
  client_id bob = rows.add_client({20, 2000, 2000, {}}, {});
};

TEST_F(Ledger, NamesAreUniqueWithinAFamilyOnly) {
  const object_id buffer = rows.add(object_kind::allocation, "weights", alice, 4096);
  EXPECT_NE(rows.add(object_kind::reservation, "weights", alice, 0), buffer);
  const object_id lock = rows.add(object_kind::lock, "weights", alice, 0);
  try {
    rows.add(object_kind::barrier, "weights", bob, 0);
    ADD_FAILURE() << "a barrier took a lock's name";
  } catch (const request_error& error) {
    EXPECT_EQ(error.code(), proto::errc::already_exists);
    EXPECT_NE(std::string(error.what()).find("'weights'"), std::string::npos) << error.what();
  }
  EXPECT_EQ(rows.find_name(object_family::allocation, "weights"), buffer);
  EXPECT_EQ(rows.find_name(object_family::sync, "weights"), lock);
  rows.erase(lock);
  EXPECT_FALSE(rows.find_name(object_family::sync, "weights"));
  EXPECT_EQ(rows.count(object_family::sync), 0u);
  EXPECT_EQ(rows.count(object_family::allocation), 1u);
}

TEST_F(Ledger, ReferencesCountPerClientAndTheOwnerLetsGoOnItsLast) {
  const object_id id = rows.add(object_kind::allocation, "", alice, 100);
  EXPECT_FALSE(rows.hold(id, alice)) << "a second reference of the same client";
  EXPECT_TRUE(rows.hold(id, bob));
  EXPECT_FALSE(rows.drop_reference(id, alice));
  EXPECT_EQ(rows.find(id)->owner, alice);
  EXPECT_TRUE(rows.drop_reference(id, alice));
  EXPECT_EQ(rows.find(id)->owner, 0u);
  EXPECT_EQ(rows.find(id)->holders.size(), 1u);
  EXPECT_FALSE(rows.client(alice).holds.contains(id));
  EXPECT_TRUE(rows.client(bob).holds.contains(id));
}

TEST_F(Ledger, HeldRefusesOtherClientsAndOtherFamiliesByName) {
  const object_id id = rows.add(object_kind::reservation, "", alice, 0);
  EXPECT_EQ(&rows.held(alice, id, object_family::reservation), rows.find(id));
  for (const auto& [who, family] :
       {std::pair{bob, object_family::reservation}, std::pair{alice, object_family::allocation}}) {
    try {
      rows.held(who, id, family);
      ADD_FAILURE() << "no error";
    } catch (const request_error& error) {
      EXPECT_EQ(error.code(), proto::errc::not_found);
      EXPECT_NE(std::string(error.what()).find(std::to_string(id)), std::string::npos);
    }
  }
}

TEST_F(Ledger, RemovingAClientWalksEachObjectItHeldOnceWithItAlreadyGone) {
  const object_id mine = rows.add(object_kind::allocation, "mine", alice, 10);
  const object_id shared = rows.add(object_kind::lock, "shared", bob, 0);
  rows.hold(shared, alice);
  rows.hold(shared, alice);
  rows.add(object_kind::allocation, "bobs", bob, 20);
  std::vector<object_id> walked;
  rows.remove_client(alice, [&](object_id id, const object_row& row) {
    walked.push_back(id);
    EXPECT_FALSE(row.holders.contains(alice));
    if (row.holders.empty()) rows.erase(id);
  });
  EXPECT_EQ(walked, (std::vector<object_id>{mine, shared}));
  EXPECT_EQ(rows.find(mine), nullptr);
  EXPECT_FALSE(rows.find_name(object_family::allocation, "mine"));
  EXPECT_EQ(rows.find(shared)->holders.size(), 1u);
  EXPECT_FALSE(rows.clients().contains(alice));
}

TEST_F(Ledger, AnswersWhatAClientAndAUidHold) {
  rows.add(object_kind::allocation, "", alice, 1000);
  const object_id other = rows.add(object_kind::allocation, "", alice_too, 500);
  rows.hold(other, alice);
  rows.add(object_kind::reservation, "", alice_too, 2 << 20);
  rows.add(object_kind::allocation, "", bob, 7);

  const auto client = rows.holdings_of(alice);
  EXPECT_EQ(client[object_family::allocation].owned, 1u);
  EXPECT_EQ(client[object_family::allocation].opened, 1u);
  EXPECT_EQ(client[object_family::allocation].bytes_owned, 1000u);
  EXPECT_EQ(client[object_family::reservation].owned, 0u);

  const auto uid = rows.holdings_of_uid(1000);
  EXPECT_EQ(uid[object_family::allocation].owned, 2u);
  EXPECT_EQ(uid[object_family::allocation].bytes_owned, 1500u);
  EXPECT_EQ(uid[object_family::reservation].bytes_owned, 2u << 20);
  EXPECT_EQ(rows.holdings_of_uid(2000)[object_family::allocation].bytes_owned, 7u);
}

TEST_F(Ledger, PagesListOneFamilyInIdOrder) {
  std::vector<object_id> locks;
  for (int i = 0; i < 5; ++i) {
    rows.add(object_kind::allocation, "", alice, 1);
    locks.push_back(rows.add(object_kind::lock, "l" + std::to_string(i), alice, 0));
  }
  auto record_of = [](object_id id, const object_row&) { return proto::list_request{id}; };
  auto every = [](const object_row&) { return true; };
  const auto first = rows.page<proto::list_request>(object_family::sync, 0, 3, every, record_of);
  ASSERT_EQ(first.records.size(), 3u);
  EXPECT_EQ(first.head.more, 1u);
  EXPECT_EQ(first.records[2].after_id, locks[2]);
  const auto rest =
      rows.page<proto::list_request>(object_family::sync, locks[2], 3, every, record_of);
  ASSERT_EQ(rest.records.size(), 2u);
  EXPECT_EQ(rest.head.more, 0u);
  EXPECT_EQ(rest.records[1].after_id, locks[4]);
}

TEST_F(Ledger, RowsErasedBetweenOthersOrRestoredOutOfOrderKeepPagesAndLookupsExact) {
  std::vector<object_id> made;
  for (int i = 0; i < 6; ++i) made.push_back(rows.add(object_kind::allocation, "", alice, 1));
  rows.erase(made[1]);
  rows.erase(made[4]);
  // A restarted daemon puts rows back in no particular order, below and above the new ones.
  const object_id above = made.back() + 10;
  object_row restored{};
  restored.kind = object_kind::allocation;
  restored.name = "restored";
  restored.owner = alice;
  restored.owner_uid = restored.owner_gid = 1000;
  restored.device = proto::kHostDevice;
  restored.bytes = 8;
  restored.holders = {{alice, 1}};
  rows.restore_object(above, restored);
  restored.name = "back";
  rows.restore_object(made[1], restored);
  auto record_of = [](object_id id, const object_row&) { return proto::list_request{id}; };
  auto every = [](const object_row&) { return true; };
  const auto page =
      rows.page<proto::list_request>(object_family::allocation, 0, 100, every, record_of);
  std::vector<object_id> listed;
  for (const auto& record : page.records) listed.push_back(record.after_id);
  EXPECT_EQ(listed, (std::vector<object_id>{made[0], made[1], made[2], made[3], made[5], above}));
  EXPECT_EQ(rows.find(made[4]), nullptr);
  EXPECT_EQ(rows.find(made[1])->name, "back");
  EXPECT_EQ(rows.find_name(object_family::allocation, "restored"), above);
  rows.erase(above);
  EXPECT_EQ(rows.find(above), nullptr);
  EXPECT_FALSE(rows.client(alice).holds.contains(above));
  EXPECT_EQ(rows.count(object_family::allocation), 5u);
  EXPECT_EQ(rows.objects().size(), 5u);
  EXPECT_EQ(rows.add(object_kind::allocation, "", alice, 1), above + 1);
}

TEST_F(Ledger, SessionsAwaitingTheirResumesAreCountedByUidAndGid) {
  // Of uid 1000: awaiting by uid and by gid, and connections; then the connections open now,
  // bob's among them.
  const auto awaiting = [&] {
    return std::vector<std::uint64_t>{
        rows.usage_of_uid(1000).awaiting_resume, rows.usage_of_gid(1000).awaiting_resume,
        rows.usage_of_uid(1000).connections, rows.connections_served()};
  };
  EXPECT_EQ(awaiting(), (std::vector<std::uint64_t>{0, 0, 2, 3}));
  rows.set_serving(alice, false);  // its connection broke; its process lives
  rows.set_serving(alice, false);  // told twice, counted once
  EXPECT_EQ(awaiting(), (std::vector<std::uint64_t>{1, 1, 2, 2}));
  client_row kept = rows.client(alice_too);
  const client_id restored = alice_too + 100;
  rows.restore_client(restored, kept);  // a restart's: no connection serves it yet
  rows.restore_client(restored, kept);  // restored again, not counted again
  EXPECT_EQ(awaiting(), (std::vector<std::uint64_t>{2, 2, 3, 2}));
  rows.set_serving(restored, true);  // its process came back
  EXPECT_EQ(awaiting(), (std::vector<std::uint64_t>{1, 1, 3, 3}));
  rows.remove_client(alice, [](object_id, const object_row&) {});
  EXPECT_EQ(awaiting(), (std::vector<std::uint64_t>{0, 0, 2, 3}));
  EXPECT_EQ(rows.usage_of_uid(2000).awaiting_resume, 0u);
}

}  // namespace
}  // namespace gpumem::daemon
