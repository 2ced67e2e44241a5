#include "reservation.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <utility>

#include "dlpack_export.hpp"
#include "durations.hpp"
#include "gil.hpp"
#include "gpumem/shared/sync/signals_end_waits.hpp"
#include "host_views.hpp"
#include "optional_names.hpp"
#include "signal_waits.hpp"
#include "streams.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace gpumem::python {

reservation_core::reservation_core(Reservation reservation)
    : reservation_(std::move(reservation)),
      data_(reservation_.data()),
      max_size_(reservation_.max_size()),
      chunk_size_(reservation_.chunk_size()),
      id_(reservation_.id()),
      device_(reservation_.device()),
      access_(reservation_.access()) {
  take_snapshot();
}

reservation_core::turn::turn(reservation_core& core) : core_(core) {
  if (core_.turn_holder_.load() == std::this_thread::get_id()) {
    throw Error(errc::busy, "reservation " + std::to_string(core_.id_) +
                                ": called by a signal handler while this thread's own sleep or "
                                "wake of it waits; call it once that returns");
  }
  core_.mutex_.lock();
  core_.turn_holder_ = std::this_thread::get_id();
}

reservation_core::turn::~turn() {
  core_.turn_holder_ = std::thread::id{};
  core_.mutex_.unlock();
}

void reservation_core::release() {
  const turn taken(*this);
  reservation_.release();
}

bool reservation_core::read_only() const noexcept {
  return access_ == Access::read_only || version() > 1;
}

void reservation_core::take_snapshot() noexcept {
  size_ = reservation_.size();
  version_ = reservation_.version();
  state_ = reservation_.state();
}

draft_core::draft_core(std::shared_ptr<reservation_core> owner, ReservationDraft open)
    : reservation(std::move(owner)), draft(std::move(open)) {}

draft_core::~draft_core() {
  if (!draft) return;
  try {
    reservation->run([this](Reservation&) { draft.reset(); });
  } catch (const Error&) {
    // Refused the turn: a signal's handler freed it while this thread's own sleep or wake of
    // the reservation waits, when no draft can be open (neither takes one). The draft's own
    // destructor abandons it, as it goes with this object.
  }
}

shared_draft::shared_draft(std::shared_ptr<draft_core> core)
    : core_(std::move(core)),
      data_(core_->draft->data()),
      size_(core_->draft->size()),
      version_(core_->draft->version()),
      device_(core_->reservation->device()) {}

const std::shared_ptr<draft_core>& shared_draft::core() const {
  if (outcome_ == outcome::open) return core_;
  throw py::buffer_error(std::string("the gpumem.ReservationDraft was ") +
                         (committed() ? "committed" : "abandoned"));
}

void shared_draft::commit() {
  const auto& core = this->core();
  if (const auto exports = core.use_count() - 1; exports != 0) {
    throw py::buffer_error("ReservationDraft.commit: " + std::to_string(exports) +
                           " export(s) of the draft (a tensor, an array, a memoryview) still "
                           "hold it; commit unmaps the draft: delete them first");
  }
  {
    py::gil_scoped_release released;
    core->reservation->run([&core](Reservation&) {
      core->draft->commit();
      core->draft.reset();
    });
  }
  outcome_ = outcome::committed;
  core_.reset();
}

void shared_draft::abandon() {
  if (outcome_ != outcome::open) return;
  outcome_ = outcome::abandoned;
  std::shared_ptr<draft_core> core = std::move(core_);
  if (core.use_count() != 1) return;  // the last of its exports abandons it
  py::gil_scoped_release released;
  core->reservation->run([&core](Reservation&) {
    core->draft->abandon();
    core->draft.reset();
  });
}

exported_range shared_draft::exported() const {
  return {data_, size_, device_, false, core()};
}

std::uintptr_t shared_draft::pointer() const {
  core();
  return reinterpret_cast<std::uintptr_t>(data_);
}

shared_reservation::shared_reservation(Reservation reservation)
    : core_(new reservation_core(std::move(reservation)), delete_without_gil<reservation_core>{}),
      id_(core_->id()),
      device_(core_->device()) {}

const std::shared_ptr<reservation_core>& shared_reservation::core() const {
  if (core_ == nullptr) throw py::buffer_error("the gpumem.Reservation was released");
  return core_;
}

void shared_reservation::release() {
  if (core_ == nullptr) return;
  std::shared_ptr<reservation_core> core = std::move(core_);
  if (core.use_count() != 1) return;  // the last of its exports and its draft releases it
  py::gil_scoped_release released;
  core->release();
}

void shared_reservation::hold_until_deallocated() {
  held_until_deallocated_ = core();
}

exported_range shared_reservation::exported() const {
  const auto& core = this->core();
  return {core->data(), core->size(), core->device(), core->read_only(), core};
}

shared_draft shared_reservation::begin_version(std::size_t bytes) {
  std::shared_ptr<reservation_core> core = this->core();
  py::gil_scoped_release released;
  ReservationDraft draft =
      core->run([bytes](Reservation& reservation) { return reservation.begin_version(bytes); });
  return shared_draft(std::shared_ptr<draft_core>(new draft_core(core, std::move(draft)),
                                                  delete_without_gil<draft_core>{}));
}

namespace {

/// Runs @p work in the reservation's turn without the GIL. The copy of the core keeps it alive
/// should another thread release the object meanwhile.
template <class Work>
decltype(auto) call(const shared_reservation& self, Work&& work) {
  std::shared_ptr<reservation_core> core = self.core();
  py::gil_scoped_release released;
  return core->run(std::forward<Work>(work));
}

// The wait holds the reservation's turn, and Python code that runs in it (a handler, a
// finalizer) could want that turn too: so any signal ends it, and Python's handlers run here,
// the turn let go; one that raises nothing has the wait go on for the time left.
bool version_through_signals(const shared_reservation& self, std::uint64_t version,
                             std::chrono::milliseconds limit) {
  using clock = std::chrono::steady_clock;
  const auto give_up = clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        std::max<clock::duration>(give_up - clock::now(), {}));
    const bool reached = [&] {
      const sync::signals_end_waits ended_by([]() noexcept { return true; });
      return call(self, [version, left](Reservation& reservation) {
        return reservation.wait_version(version, left);
      });
    }();
    if (reached) return true;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (clock::now() >= give_up) return false;
  }
}

SleepOptions sleep_options(bool discard, py::handle deadline) {
  SleepOptions options{.discard = discard};
  // Zero asks for the daemon's default: a deadline given as 0 s means as short as can be.
  if (!deadline.is_none()) {
    options.deadline =
        std::max(milliseconds_from(deadline, "deadline"), std::chrono::milliseconds(1));
  }
  return options;
}

exported_range exported_reservation(py::handle self) {
  return self.cast<const shared_reservation&>().exported();
}

exported_range exported_draft(py::handle self) {
  return self.cast<const shared_draft&>().exported();
}

// The range is mapped by host calls that are done when they return: the consumer's stream has
// nothing of ours to wait for, so the stream argument is only checked.
template <class Exporter>
py::capsule dlpack_of(const Exporter& self, py::handle stream, py::handle max_version,
                      py::handle dl_device, py::handle copy) {
  const exported_range range = self.exported();
  static_cast<void>(dlpack_consumer_stream(stream, range.device));
  return dlpack_capsule(range, max_version, dl_device, copy);
}

// CuPy and Numba keep a reference to the object that gave them the interface, not to the
// memory: this object holds the reservation for them until it is deallocated.
py::dict cuda_array_interface(shared_reservation& self) {
  if (self.device() == kHost) {
    throw py::attribute_error(
        "__cuda_array_interface__: a host reservation is not CUDA memory (use the buffer "
        "protocol or DLPack)");
  }
  self.hold_until_deallocated();
  const exported_range range = self.exported();
  py::dict interface;
  interface["shape"] = py::make_tuple(range.size);
  interface["typestr"] = "|u1";
  interface["data"] = py::make_tuple(reinterpret_cast<std::uintptr_t>(range.data), range.read_only);
  interface["strides"] = py::none();
  interface["version"] = 3;
  interface["stream"] = py::none();  // nothing to wait for (see dlpack_of)
  return interface;
}

std::string describe(const shared_reservation& self) {
  std::string text = "<gpumem.Reservation id=" + std::to_string(self.id());
  if (self.released()) return text + " device=" + device_name(self.device()) + " released>";
  const auto& core = self.core();
  text += " version=" + std::to_string(core->version()) + " size=" + std::to_string(core->size()) +
          " max_size=" + std::to_string(core->max_size()) +
          " device=" + device_name(self.device()) + " " + to_string(core->state());
  if (core->read_only()) text += " read_only";
  return text + ">";
}

std::string describe(const shared_draft& draft) {
  std::string text = "<gpumem.ReservationDraft version=" + std::to_string(draft.version()) +
                     " size=" + std::to_string(draft.size()) +
                     " device=" + device_name(draft.device());
  if (draft.committed()) text += " committed";
  if (draft.abandoned()) text += " abandoned";
  return text + ">";
}

std::string describe(const ReservationStatus& status) {
  std::string text = "<gpumem.ReservationStatus id=" + std::to_string(status.id) +
                     " version=" + std::to_string(status.version) +
                     " committed=" + std::to_string(status.committed) +
                     " host_bytes=" + std::to_string(status.host_bytes) + " " +
                     to_string(status.state);
  if (status.busy) text += " busy";
  if (status.error != errc::ok) text += " error='" + status.reason + "'";
  return text + ">";
}

void bind_state(py::module_& module) {
  py::enum_<ReservationState>(module, "ReservationState", "Where a reservation is.")
      .value("awake", ReservationState::awake,
             "its current version is mapped (or will be, at the next refresh)")
      .value("draining", ReservationState::draining,
             "going to sleep: holders let go at their next refresh() or quiesce()")
      .value("asleep", ReservationState::asleep, "its bytes are on the host; nothing is mapped")
      .value("lost", ReservationState::lost, "its owner let go of it while it slept: it is gone");

  py::class_<ReservationStatus>(module, "ReservationStatus",
                                "What the daemon says of a reservation now.")
      .def_readonly("id", &ReservationStatus::id)
      .def_readonly("version", &ReservationStatus::version)
      .def_readonly("committed", &ReservationStatus::committed, "bytes of the current version")
      .def_readonly("host_bytes", &ReservationStatus::host_bytes,
                    "host memory holding them while asleep")
      .def_readonly("state", &ReservationStatus::state)
      .def_readonly("busy", &ReservationStatus::busy, "a sleep or wake is under way")
      .def_readonly("error", &ReservationStatus::error,
                    "how the last sleep or wake failed (errc.ok when it did not)")
      .def_readonly("reason", &ReservationStatus::reason)
      .def("__repr__", [](const ReservationStatus& status) { return describe(status); });
}

void bind_draft(py::module_& module) {
  py::class_<shared_draft> type(
      module, "ReservationDraft", py::buffer_protocol(),
      "The next version of a reservation while its owner writes it: fresh memory, writable at "
      "an address of its own (ptr), invisible to holders until commit(). `with` abandons it at "
      "the end of the block unless it was committed. Its exports (DLPack, the buffer protocol) "
      "hold it: commit() refuses while one lives, as it unmaps the draft.");
  enable_host_views<exported_draft>(type);
  type.def_property_readonly("ptr", &shared_draft::pointer, "the draft's address in this process")
      .def_property_readonly("size", &shared_draft::size, "bytes")
      .def_property_readonly("version", &shared_draft::version, "the version it becomes")
      .def_property_readonly("device", &shared_draft::device)
      .def_property_readonly("committed", &shared_draft::committed)
      .def_property_readonly("abandoned", &shared_draft::abandoned)
      .def("commit", &shared_draft::commit,
           "Makes it the current version, mapped read-only at the reservation's own address; "
           "holders switch at their next refresh(). Let the GPU work writing it finish first. "
           "gpumem.Error(errc.busy) when its memory is still mapped writable elsewhere.")
      .def("abandon", &shared_draft::abandon,
           "Frees it (at once, or when its last export goes); the current version is untouched. "
           "Does nothing once committed.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](shared_draft& draft, py::args) { draft.abandon(); })
      .def("__dlpack__", &dlpack_of<shared_draft>, "stream"_a = py::none(), py::kw_only(),
           "max_version"_a = py::none(), "dl_device"_a = py::none(), "copy"_a = py::none())
      .def("__dlpack_device__",
           [](const shared_draft& draft) { return dlpack_device(draft.device()); })
      .def("__repr__", [](const shared_draft& draft) { return describe(draft); });
}

void bind_reservation_type(py::module_& module) {
  py::class_<shared_reservation> type(
      module, "Reservation", py::buffer_protocol(),
      "A range at a fixed address (ptr) in every holder, that changes version, sleeps to host "
      "memory and wakes without moving. Exported without copies through DLPack, the buffer "
      "protocol (host) and __cuda_array_interface__ (CUDA); an export describes the range as "
      "mapped when it was made and holds the reservation. It stays valid across versions and "
      "wake, but must not be used while the reservation sleeps or is quiesced, nor beyond "
      "size after a refresh that shrank it.");
  enable_host_views<exported_reservation>(type);
  type.def_property_readonly(
          "ptr",
          [](const shared_reservation& self) {
            return reinterpret_cast<std::uintptr_t>(self.core()->data());
          },
          "the range's address in this process (host) or on the device (CUDA): fixed for the "
          "object's life")
      .def_property_readonly(
          "size", [](const shared_reservation& self) { return self.core()->size(); },
          "bytes mapped here (0 while asleep or quiesced), as of the last call")
      .def_property_readonly("max_size",
                             [](const shared_reservation& self) { return self.core()->max_size(); })
      .def_property_readonly(
          "chunk_size", [](const shared_reservation& self) { return self.core()->chunk_size(); })
      .def_property_readonly("id", &shared_reservation::id)
      .def_property_readonly("device", &shared_reservation::device,
                             "gpumem.HOST (-1) or the CUDA device number")
      .def_property_readonly(
          "version", [](const shared_reservation& self) { return self.core()->version(); },
          "the version mapped here, as of the last call")
      .def_property_readonly(
          "state", [](const shared_reservation& self) { return self.core()->state(); },
          "as of the last call")
      .def_property_readonly(
          "read_only", [](const shared_reservation& self) { return self.core()->read_only(); },
          "mapped without write access here: a read-only holder, or a version after the first")
      .def_property_readonly("released", &shared_reservation::released)
      .def(
          "refresh",
          [](const shared_reservation& self) {
            return call(self, [](Reservation& reservation) { return reservation.refresh(); });
          },
          "Maps what is current (more bytes, a newer version, or nothing while it sleeps) at "
          "the same address; asks the daemon only when something changed. Returns size. Let "
          "the GPU work on the range finish first.")
      .def(
          "wait_version",
          [](const shared_reservation& self, std::uint64_t version, py::handle timeout) {
            return version_through_signals(self, version, milliseconds_from(timeout, "timeout"));
          },
          "version"_a, "timeout"_a = py::none(),
          "Waits (seconds or a timedelta; None: for ever) until the current version is at least "
          "`version`, then refresh()es. False when the time ran out first. Other calls on this "
          "object wait for it meanwhile.")
      .def(
          "quiesce",
          [](const shared_reservation& self) {
            call(self, [](Reservation& reservation) { reservation.quiesce(); });
          },
          "Lets go of the mapping (the address range stays reserved), so that a sleep need not "
          "wait for this holder; the next refresh() maps again.")
      .def(
          "resize",
          [](const shared_reservation& self, std::size_t nbytes) {
            call(self, [nbytes](Reservation& reservation) { reservation.resize(nbytes); });
          },
          "nbytes"_a, "Owner, version 1 only: backs `nbytes` (whole chunks) from ptr on, in place.")
      .def("begin_version", &shared_reservation::begin_version, "nbytes"_a,
           "Owner only: a ReservationDraft of `nbytes` (at most max_size) to write the next "
           "version in.")
      .def(
          "sleep",
          [](const shared_reservation& self, bool discard, py::handle deadline) {
            const SleepOptions options = sleep_options(discard, deadline);
            wait_through_signals([&] {
              call(self, [&options](Reservation& reservation) { reservation.sleep(options); });
            });
          },
          py::kw_only(), "discard"_a = false, "deadline"_a = py::none(),
          "Owner: puts it to sleep (its bytes to host memory of the daemon; discard: dropped, "
          "to wake zeroed) and waits. Holders get `deadline` seconds to let go (None: the "
          "daemon's default); gpumem.Error(errc.busy) names those that did not, and it stays "
          "awake. Ctrl-C (a handler that raises) ends the wait, not the sleep, which goes on: "
          "status() shows how it ends. A handler that runs meanwhile may not call this "
          "reservation (gpumem.Error(errc.busy)).")
      .def(
          "wake",
          [](const shared_reservation& self, py::handle timeout) {
            const auto limit = milliseconds_from(timeout, "timeout");
            wait_through_signals([&] {
              call(self, [limit](Reservation& reservation) { reservation.wake(limit); });
            });
          },
          "timeout"_a = 60.0,
          "Wakes it (the bytes copied back), waits up to `timeout` seconds and maps it here "
          "again, at the same address. Ctrl-C ends the wait, not the wake, as for sleep(); "
          "refresh() maps it once it is awake.")
      .def(
          "status",
          [](const shared_reservation& self) {
            return call(self, [](Reservation& reservation) { return reservation.status(); });
          },
          "What the daemon says of it now.")
      .def("release", &shared_reservation::release,
           "Unmaps it and lets go; exports and an open draft keep it until they are gone. Once "
           "__cuda_array_interface__ has been read, this object keeps it until deallocated.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](shared_reservation& self, py::args) { self.release(); })
      .def("__dlpack__", &dlpack_of<shared_reservation>, "stream"_a = py::none(), py::kw_only(),
           "max_version"_a = py::none(), "dl_device"_a = py::none(), "copy"_a = py::none())
      .def("__dlpack_device__",
           [](const shared_reservation& self) { return dlpack_device(self.device()); })
      .def_property_readonly("__cuda_array_interface__", &cuda_array_interface,
                             "CUDA reservations. Reading it makes this object hold the "
                             "reservation until it is deallocated, release() notwithstanding.")
      .def("__repr__", [](const shared_reservation& self) { return describe(self); });
}

}  // namespace

void bind_reservation_calls(py::class_<Client>& client_type) {
  client_type
      .def(
          "reserve",
          [](Client& client, std::size_t max_bytes, int device,
             const std::optional<std::string>& name, std::size_t initial, Mode mode) {
            const ReserveOptions options{.device = device,
                                         .name = name_or_none(name, "reservation name"),
                                         .initial = initial,
                                         .mode = mode};
            py::gil_scoped_release released;
            return shared_reservation(Reservation::create(client, max_bytes, options));
          },
          "max_bytes"_a, py::kw_only(), "device"_a = 0, "name"_a = py::none(), "initial"_a = 0,
          "mode"_a = py::none(),
          "A Reservation of up to `max_bytes` on a CUDA device or gpumem.HOST, with `initial` "
          "bytes (whole chunks) backed at once: version 1, which its owner writes in place. "
          "Named, other processes can open_reservation() it (who: `mode`, as for allocate).")
      .def(
          "open_reservation",
          [](Client& client, const std::string& name, bool read_only) {
            const OpenReservationOptions options{.access = read_only ? Access::read_only
                                                                     : Access::read_write};
            py::gil_scoped_release released;
            return shared_reservation(Reservation::open(client, name, options));
          },
          "name"_a, py::kw_only(), "read_only"_a = false,
          "Opens a named reservation of any process, mapped at an address of this process.")
      .def(
          "reservation_status",
          [](Client& client, const std::string& name) {
            return gpumem::reservation_status(client, name);
          },
          "name"_a, py::call_guard<py::gil_scoped_release>(),
          "An operator's view of a reservation by name, as `gpumemctl reservation-status`.")
      .def(
          "sleep_reservation",
          [](Client& client, const std::string& name, bool discard, py::handle deadline) {
            const SleepOptions options = sleep_options(discard, deadline);
            wait_through_signals([&] {
              py::gil_scoped_release released;
              gpumem::sleep_reservation(client, name, options);
            });
          },
          "name"_a, py::kw_only(), "discard"_a = false, "deadline"_a = py::none(),
          "An operator's sleep, as `gpumemctl sleep NAME`: as Reservation.sleep.")
      .def(
          "wake_reservation",
          [](Client& client, const std::string& name, py::handle timeout) {
            const auto limit = milliseconds_from(timeout, "timeout");
            wait_through_signals([&] {
              py::gil_scoped_release released;
              gpumem::wake_reservation(client, name, limit);
            });
          },
          "name"_a, py::kw_only(), "timeout"_a = 60.0,
          "An operator's wake, as `gpumemctl wake NAME`: as Reservation.wake.");
}

void bind_reservation(py::module_& module) {
  bind_state(module);
  bind_draft(module);
  bind_reservation_type(module);
}

}  // namespace gpumem::python
