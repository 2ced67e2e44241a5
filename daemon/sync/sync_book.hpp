#pragma once
/// @file
/// @brief daemon/sync/: locks, barriers and channels, as the daemon keeps them.
///
/// Clients change the words of the shared pages themselves; the daemon hands out what they
/// need (a client slot, one cell per named object, the pages of those cells, a party of a
/// barrier, each page's signal page on a device) and repairs after a death: the sync book
/// keeps, beside each object's ledger row, its page, cell and parties, and calls the objects'
/// protocols (gpumem/shared/sync/) to clean up. A lock's whole protocol lives in
/// gpumem/shared/sync/lock.hpp.
///
/// Each access class has pages of its own (sync/sync_page.hpp): the first made with the first
/// object of the class or the first client whose own objects it holds, another whenever every
/// cell of the class's pages is taken, each freed when it holds no object and no client's own
/// objects go there. So a class holds as many objects as the quotas let it.
/// A client is given a page, or its signal pages, only if it may use the objects of the page's
/// class, so a tenant can corrupt only objects it may use. Client slots name clients on every
/// page and stay global.
///
/// The daemon never trusts or waits on the shared pages: every repair checks the cell against
/// what the book knows (epoch, parties, slots) and is bounded. A cell found corrupt is marked
/// here, where no client can write: opening it is refused (not_recoverable) until an operator's
/// reset rewrites it from scratch. A lock left owner-died, not recoverable or corrupt keeps its
/// name and cell with nobody holding it, until a reset, until it is made consistent and closed,
/// or until its cell is the last one of its class's pages that a new object can get (a class
/// gets a new page only when none of its cells is kept so).
/// May include: proto/ and shared/ headers, daemon/ledger/, daemon/request_error.hpp. Not:
/// daemon/net/, daemon/memory/, daemon/handlers/.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "gpumem/proto/messages.hpp"
#include "gpumem/shared/sync/host_counters.hpp"
#include "gpumem/shared/sync/host_lock.hpp"
#include "gpumem/shared/sync/layout.hpp"
#include "ledger/ledger.hpp"
#include "policy/access_policy.hpp"
#include "policy/descriptor_budget.hpp"
#include "policy/quota_policy.hpp"
#include "sync/signal_page.hpp"
#include "sync/sync_page.hpp"

namespace gpumem::daemon {

class sync_book {
 public:
  /// @param make_signal_page empty when there is no CUDA: stream and device forms are refused.
  /// @param descriptors what a new page's descriptor must fit: it is kept in the fd store.
  sync_book(ledger& rows, const access_policy& access, const quota_policy& quotas,
            descriptor_budget& descriptors, signal_page_maker make_signal_page = {});
  sync_book(const sync_book&) = delete;
  sync_book& operator=(const sync_book&) = delete;

  struct attachment {
    std::uint16_t slot;
    const sync_page& own_page;  ///< where the objects it makes with the default mode go
  };
  /// @return the client's slot and own page, the same on every call.
  /// @throws request_error(out_of_memory) when every slot is taken.
  attachment attach(client_id client);
  /// @throws request_error(not_found) unless @p client may use the objects of the page.
  const sync_page& page_for(client_id client, std::uint32_t page_id) const;
  struct opened {
    proto::sync_open_reply reply;
    /// The object's page, to go with the reply, when the request has kFlagSendPage and the page
    /// is neither the client's own nor one it has another object open on (which it has mapped,
    /// unless it let go of that object just now: then it asks get_sync_page); else nullptr.
    const sync_page* page_to_send;
  };
  /// @param layout a channel's slot layout (open_channel), kept with the channel from the first
  /// opener that names one; nullptr for open_sync, whose opener is not checked against it.
  /// @throws request_error: bad_message before attach, invalid_argument for a party count or
  /// a layout that differs from the existing object's, no_party_left, wrong_state for a broken
  /// barrier or channel, out_of_memory.
  opened open(client_id client, const proto::sync_open_request& request,
              const proto::channel_layout* layout = nullptr);
  /// @brief Closes one of @p client's objects: a barrier's or channel's party leaves, which
  /// breaks it; a host lock that the client no longer has open at all is let go of as at its
  /// death (its hold released with owner_died, its places in the queue given up).
  void close(client_id client, const proto::sync_close_request& request);
  /// @throws request_error(not_found), not_supported for a stream-ordered lock,
  /// permission_denied unless @p client's uid owns it or is an administrator.
  void reset(client_id client, const proto::sync_reset_request& request);
  /// @brief A page of what @p asker may see (access_policy::may_see).
  proto::sync_list_reply list(client_id asker, object_id after) const;
  /// @brief The signal page of page @p page_id on @p device, made on first use.
  /// @throws request_error(not_found) as page_for(), not_supported without CUDA, no_such_device.
  const signal_page& signal_page_of(client_id client, std::uint32_t page_id, std::int32_t device);

  /// @brief The ledger took every reference of the dead (or departed) @p client off @p id:
  /// hands its locks on (owner died), breaks barriers and channels it was a party of, and
  /// frees the cell once nobody holds the object.
  void let_go(object_id id, const object_row& row, client_id client) noexcept;
  /// @brief After let_go() of each of its objects: frees the client's slot, unless a
  /// clean-up under it is still pending.
  void detach(client_id client) noexcept;
  /// What reclaim tells of a lock whose holder died holding it (a host hold, a stream-ordered
  /// turn or the device lock): the next holder learns the owner died.
  struct owner_death {
    object_id id;
    const object_row& row;
    client_id dead_client;  ///< 0 when a clean-up that was pending finished it
    pid_t dead_pid;         ///< 0 when no longer known
  };
  using owner_death_listener = std::function<void(const owner_death&)>;
  /// @brief Called once per lock and death, on the loop, from let_go() and settle().
  void on_owner_death(owner_death_listener listener) { owner_death_ = std::move(listener); }
  /// @brief Finishes clean-ups that found a hand-off in flight, and passes on the dead
  /// clients' stream turns that have come (signal_page::pass_arrived_turns()).
  /// @return true when neither is left.
  bool settle() noexcept;
  bool has_pending() const noexcept { return !pending_.empty() || has_waiting_turns(); }

  /// @name What the state store (daemon/restart/) writes down and puts back.
  /// @{
  struct saved_cell {
    std::uint32_t page = 0;
    std::uint32_t cell = 0;
    std::uint32_t parties = 0;
    std::vector<client_id> party_clients;
    std::uint32_t epoch = 0;
    bool corrupt = false;
    bool kept = false;
    bool broken = false;
    proto::channel_layout layout{};
  };
  struct saved_attachment {
    std::uint16_t slot = 0;
    std::uint32_t own_page = 0;
  };
  struct saved_reclaim {
    std::uint16_t slot = 0;
    object_id id = 0;
  };
  std::optional<saved_cell> cell_of(object_id id) const;
  std::optional<saved_attachment> attachment_of(client_id client) const;
  std::vector<saved_reclaim> pending_reclaims() const;
  /// @return nullptr for a page id in no use.
  const sync_page* page_by_id(std::uint32_t page_id) const noexcept;
  std::vector<std::uint32_t> page_ids() const;

  void adopt_page(std::unique_ptr<sync_page> adopted);
  /// @brief Object @p id (its ledger row restored) keeps its cell, parties and state.
  /// @throws request_error(internal) when its page is unknown or the cell is taken.
  void adopt_cell(object_id id, const saved_cell& saved);
  /// @brief Client @p client (its ledger row restored) keeps its slot: a lock it held stays
  /// held by it.
  void adopt_attachment(client_id client, const saved_attachment& saved);
  void adopt_pending(const saved_reclaim& saved);
  /// @brief Gives the signal pages the turns of dead clients that the previous daemon had
  /// not seen passed (sync::resume_stream_turns()), once, after the cells, attachments and
  /// pending clean-ups are adopted. A cell found inconsistent is marked corrupt; a lock whose
  /// page cannot take its turns is logged and left.
  void resume_dead_turns() noexcept;
  /// @}

 private:
  struct cell_entry {
    std::uint32_t page;
    std::uint32_t cell;  ///< its index on the page
    std::uint32_t parties = 0;
    std::vector<client_id> party_clients;  ///< party -> client; 0 when free
    std::uint32_t epoch = 0;               ///< the cell's epoch: only a reset moves it
    const char* corrupt_rule = nullptr;    ///< set when found corrupt: the rule it broke
    bool kept = false;                     ///< a lock nobody holds, kept for its state
    /// A barrier or channel a party died or left since the last reset: nobody joins it until
    /// the next reset, so no party's GPU count jumps twice (see take_party()).
    bool broken = false;
    /// A channel's slot layout, from the first opener that named one; all zero until then.
    proto::channel_layout layout{};
  };
  struct attached_client {
    std::uint16_t slot;
    std::uint32_t own_page;
    /// Page other than its own -> how many opens of objects on it the client has not closed:
    /// whether it has the page mapped. Starts empty when a restarted daemon adopts the client,
    /// which then gets pages it has already (it closes the copy).
    std::map<std::uint32_t, std::uint32_t> opens_on_page{};
  };
  struct pending_reclaim {
    std::uint16_t slot;
    object_id id;
    unsigned attempts = 0;
  };

  template <class Cell>
  Cell& cell_as(const cell_entry& entry) const noexcept {
    return *reinterpret_cast<Cell*>(pages_.at(entry.page)->cell(entry.cell));
  }
  /// The first page of @p tenant, made if there is none.
  sync_page& page_of_class(const access_class& tenant);
  /// A new page for @p tenant, with the lowest free id: ids of pages in use stay small, and so
  /// do cell ids. @throws request_error(out_of_memory) when every page id is taken.
  sync_page& make_page(const access_class& tenant);
  void free_page_if_unused(std::uint32_t page_id) noexcept;
  /// @brief A cell of @p tenant's pages, now @p id's: on the lowest page with a free cell,
  /// else the cell of the class's oldest kept lock, else on a new page.
  /// @return the page and the cell's index on it.
  /// @throws request_error(out_of_memory) when every page id is taken.
  std::pair<sync_page*, std::uint32_t> take_cell(object_id id, const access_class& tenant);
  /// @brief A channel's items live in the allocation CHANNEL.slots, which libgpumem makes or
  /// opens before it opens the channel: one of another uid than @p channel_owner would let that
  /// user read and change every item (a name taken before the channel was made).
  /// @throws request_error(permission_denied) naming both; the owners go to the log only.
  void check_slots_owner(const std::string& channel, uid_t channel_owner) const;
  std::uint32_t take_party(cell_entry& entry, const object_row& row, client_id client,
                           proto::sync_role role);
  /// @return in_flight while a hand-off is in flight; a corrupt cell is marked.
  sync::repair_status reclaim(object_id id, const object_row& row, std::uint16_t dead_slot,
                              client_id dead_client) noexcept;
  /// Breaks a barrier or channel whose @p party died or left.
  void break_party(object_id id, const object_row& row, cell_entry& entry, std::uint32_t party);
  sync::lock_facts lock_facts_of(const cell_entry& entry) const noexcept;
  sync::counter_facts counter_facts_of(const object_row& row,
                                       const cell_entry& entry) const noexcept;
  /// @return the rule @p entry's cell breaks, nullptr when consistent.
  const char* check(const object_row& row, const cell_entry& entry) const noexcept;
  /// Marks the object broken in the book, says so once, and tells its users on the page.
  void mark_corrupt(object_id id, const object_row& row, cell_entry& entry,
                    const char* rule) noexcept;
  /// Whether a lock nobody holds has a state worth keeping its name for.
  bool worth_keeping(const object_row& row, const cell_entry& entry) noexcept;
  /// Frees the cell of the oldest kept lock on the pages of @p tenant; false when none is kept.
  bool evict_kept(const access_class& tenant) noexcept;
  /// Marks the lock kept (see the file comment) or no longer kept.
  void set_kept(object_id id, cell_entry& entry, bool kept);
  /// The signal page a stream or device object's words are on; nullptr for host objects and
  /// for devices whose page was never made.
  signal_page* signal_page_for(const cell_entry& entry, std::uint32_t domain_word) noexcept;
  signal_page* gpu_page_of(const object_row& row, const cell_entry& entry) noexcept;
  std::uint32_t domain_word(const object_row& row, const cell_entry& entry) const noexcept;
  /// Whether a lock is used on the host, or not used yet: not in stream order nor in kernels.
  bool used_on_the_host(const object_row& row, const cell_entry& entry) const noexcept;
  /// Frees the object once nobody holds it and nothing of it is pending, unless it is a lock
  /// whose state is kept (see the file comment).
  void forget_if_unused(object_id id) noexcept;
  void forget(object_id id) noexcept;
  /// The client attached under @p slot; 0 when none is (any more).
  client_id client_of_slot(std::uint16_t slot) const noexcept;
  bool has_waiting_turns() const noexcept;
  /// Passes on the turns that have come, on every signal page.
  void pass_arrived_turns() noexcept;

  ledger& rows_;
  const access_policy& access_;
  const quota_policy& quotas_;
  descriptor_budget& descriptors_;
  signal_page_maker make_signal_page_;
  std::map<std::uint32_t, std::unique_ptr<sync_page>> pages_;
  /// Each class's pages by id; a class has at least one while it has any.
  std::map<access_class, std::set<std::uint32_t>> class_pages_;
  std::map<object_id, cell_entry> objects_;
  /// The kept locks by page, oldest (lowest id) first on each, for evict_kept().
  std::set<std::pair<std::uint32_t, object_id>> kept_;
  std::map<client_id, attached_client> attached_;
  sync::slot_set slot_taken_;
  std::vector<pending_reclaim> pending_;
  owner_death_listener owner_death_;
};

}  // namespace gpumem::daemon
