#include "sync.hpp"

#include <chrono>
#include <optional>

#include "buffer.hpp"
#include "durations.hpp"
#include "signal_waits.hpp"
#include "streams.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace gpumem::python {

namespace {

using timeout_t = std::optional<std::chrono::nanoseconds>;

/// A slot of a channel, with its place in the channel's buffer.
struct channel_slot {
  std::uintptr_t data = 0;
  std::size_t offset = 0;
  std::uint64_t sequence = 0;
  BarrierStatus status = BarrierStatus::ok;
};

channel_slot slot_of(Channel& channel, const Channel::Slot& slot) {
  const auto* base = static_cast<const std::byte*>(channel.buffer().data());
  const auto* data = static_cast<const std::byte*>(slot.data);
  return {reinterpret_cast<std::uintptr_t>(slot.data), static_cast<std::size_t>(data - base),
          slot.sequence, slot.status};
}

/// Host-held Locks, each kept alive until unlocked, as a threading.Lock dropped while held stays
/// held: closing a held Lock's last reference tells the daemon the holder died, and it hands
/// the lock on while this process may still be using what it protects (`client.lock(n).acquire()`
/// drops it at once). Never freed: at exit, the process's end releases what is still held.
py::set& held_locks() {
  static py::set* const held = new py::set();
  return *held;
}

void keep_while_held(py::handle lock, bool held) {
  if (held) held_locks().add(lock);
}

void let_go_of_hold(py::handle lock) {
  if (PySet_Discard(held_locks().ptr(), lock.ptr()) < 0) throw py::error_already_set();
}

// The host form waits, so it runs without the GIL; the stream form only queues work.
template <class Result, class HostForm, class StreamForm>
Result host_or_stream(py::handle stream, HostForm host_form, StreamForm stream_form) {
  if (stream.is_none()) {
    py::gil_scoped_release released;
    return host_form();
  }
  const Stream on = stream_from(stream);
  py::gil_scoped_release released;
  return stream_form(on);
}

LockStatus acquire_through_signals(Lock& lock, timeout_t timeout) {
  // A turn that comes as a handler raises is passed on by the wait (sync::signals_end_waits).
  return wait_through_signals([&] {
    py::gil_scoped_release released;
    return timeout ? lock.try_acquire_for(*timeout) : lock.acquire();
  });
}

BarrierStatus round_through_signals(Barrier& barrier, Barrier::Token token, timeout_t timeout) {
  return wait_through_signals([&] {
    py::gil_scoped_release released;
    return timeout ? barrier.wait_for(token, *timeout) : barrier.wait(token);
  });
}

template <class HostWait>
channel_slot slot_through_signals(Channel& channel, HostWait host_wait) {
  return slot_of(channel, wait_through_signals([&] {
                   py::gil_scoped_release released;
                   return host_wait();
                 }));
}

void bind_lock(py::module_& module) {
  py::enum_<LockStatus>(module, "Acquired", "What Lock.acquire() got; false only for timeout.")
      .value("acquired", LockStatus::acquired)
      .value("owner_died", LockStatus::acquired_owner_died,
             "held, and the previous holder died holding it: repair, then mark_consistent()")
      .value("timeout", LockStatus::timeout)
      .def("__bool__", [](LockStatus status) { return status != LockStatus::timeout; });

  py::class_<Lock, held_lock>(module, "Lock",
                              "A named lock shared by processes: FIFO on the host, or in "
                              "stream order. `with lock:` holds it on the host.")
      .def_property_readonly("name", &Lock::name)
      .def_property_readonly("owner_died", &Lock::owner_died)
      .def(
          "acquire",
          [](py::object self, py::handle timeout_seconds) {
            const LockStatus got =
                acquire_through_signals(self.cast<Lock&>(), duration_from(timeout_seconds));
            keep_while_held(self, got != LockStatus::timeout);
            return got;
          },
          "timeout"_a = py::none(),
          "Waits for the lock on the host (seconds or a timedelta; None: for ever). Held, the "
          "Lock lives until unlocked, its last reference dropped or not.")
      .def("try_lock",
           [](py::object self) {
             Lock& lock = self.cast<Lock&>();
             const bool got = [&] {
               py::gil_scoped_release released;
               return lock.try_lock();
             }();
             keep_while_held(self, got);
             return got;
           })
      .def(
          "lock",
          [](py::object self, py::handle stream) {
            Lock& lock = self.cast<Lock&>();
            if (stream.is_none()) {
              keep_while_held(self,
                              acquire_through_signals(lock, std::nullopt) != LockStatus::timeout);
              return;
            }
            const Stream on = stream_from(stream);
            py::gil_scoped_release released;
            lock.lock(on);
          },
          "stream"_a = py::none())
      .def(
          "unlock",
          [](py::object self, py::handle stream) {
            Lock& lock = self.cast<Lock&>();
            if (stream.is_none()) let_go_of_hold(self);
            host_or_stream<void>(
                stream, [&] { lock.unlock(); }, [&](Stream on) { lock.unlock(on); });
          },
          "stream"_a = py::none())
      .def("mark_consistent", &Lock::mark_consistent)
      .def("__enter__",
           [](py::object self) {
             keep_while_held(self, acquire_through_signals(self.cast<Lock&>(), std::nullopt) !=
                                       LockStatus::timeout);
             return self;
           })
      .def("__exit__",
           [](py::object self, py::args) {
             Lock& lock = self.cast<Lock&>();
             let_go_of_hold(self);
             lock.unlock();
           })
      .def("__repr__", [](const Lock& lock) { return "<gpumem.Lock '" + lock.name() + "'>"; });
}

void bind_barrier(py::module_& module) {
  py::enum_<BarrierStatus>(module, "BarrierStatus")
      .value("ok", BarrierStatus::ok)
      .value("broken", BarrierStatus::broken, "a party died or left: the round never completes")
      .value("timeout", BarrierStatus::timeout);

  py::class_<Barrier::Token>(module, "BarrierToken", "A round of a barrier, from arrive().")
      .def_readonly("round", &Barrier::Token::round)
      .def_readonly("epoch", &Barrier::Token::epoch)
      .def("__repr__", [](const Barrier::Token& token) {
        return "<gpumem.BarrierToken round=" + std::to_string(token.round) +
               " epoch=" + std::to_string(token.epoch) + ">";
      });

  py::class_<Barrier, held_barrier>(module, "Barrier", "One party of a named barrier of processes.")
      .def_property_readonly("name", &Barrier::name)
      .def_property_readonly("parties", &Barrier::parties)
      .def_property_readonly("party", &Barrier::party)
      .def_property_readonly("broken", &Barrier::broken)
      .def(
          "arrive",
          [](Barrier& barrier, py::handle stream) {
            return host_or_stream<Barrier::Token>(
                stream, [&] { return barrier.arrive(); },
                [&](Stream on) { return barrier.arrive(on); });
          },
          "stream"_a = py::none())
      .def(
          "wait",
          [](Barrier& barrier, Barrier::Token token, py::handle stream,
             py::handle timeout_seconds) -> py::object {
            const timeout_t timeout = duration_from(timeout_seconds);
            if (!stream.is_none()) {
              if (timeout) throw py::value_error("a stream-ordered wait takes no timeout");
              const Stream on = stream_from(stream);
              py::gil_scoped_release released;
              barrier.wait(token, on);
              return py::none();
            }
            return py::cast(round_through_signals(barrier, token, timeout));
          },
          "token"_a, "stream"_a = py::none(), "timeout"_a = py::none(),
          "Host: waits for the round and returns a BarrierStatus. Stream: queues the wait.")
      .def(
          "arrive_and_wait",
          [](Barrier& barrier) {
            const Barrier::Token token = [&] {
              py::gil_scoped_release released;
              return barrier.arrive();
            }();
            return round_through_signals(barrier, token, std::nullopt);
          },
          "Arrives and waits for the round. Interrupted (KeyboardInterrupt), the arrival "
          "stands: the round goes on without this wait.")
      .def("__repr__", [](const Barrier& barrier) {
        return "<gpumem.Barrier '" + barrier.name() + "' party " + std::to_string(barrier.party()) +
               " of " + std::to_string(barrier.parties()) + ">";
      });
}

void bind_channel(py::module_& module) {
  py::enum_<ChannelRole>(module, "ChannelRole")
      .value("producer", ChannelRole::producer)
      .value("consumer", ChannelRole::consumer);

  py::class_<channel_slot>(module, "ChannelSlot", "A slot of a channel: an item's place.")
      .def_readonly("data", &channel_slot::data, "the slot's address (host or device)")
      .def_readonly("offset", &channel_slot::offset, "where the slot starts in Channel.buffer")
      .def_readonly("sequence", &channel_slot::sequence, "the item's number, from 0")
      .def_readonly("status", &channel_slot::status)
      .def("__repr__", [](const channel_slot& slot) {
        return "<gpumem.ChannelSlot sequence=" + std::to_string(slot.sequence) +
               " offset=" + std::to_string(slot.offset) + ">";
      });

  py::class_<Channel, held_channel>(module, "Channel",
                                    "A ring of slots from one producer to consumers that each "
                                    "see every item in order.")
      .def_property_readonly("name", &Channel::name)
      .def_property_readonly("producer", &Channel::producer)
      .def_property_readonly("broken", &Channel::broken)
      .def_property_readonly("slots", &Channel::slots)
      .def_property_readonly("slot_bytes", &Channel::slot_bytes)
      .def_property_readonly(
          "buffer",
          [](const held_channel& self) {
            return shared_buffer::borrowed(std::shared_ptr<Buffer>(self, &self->buffer()));
          },
          "the slots, as a Buffer that keeps the channel alive")
      .def(
          "acquire_slot",
          [](Channel& channel, py::handle stream) {
            if (stream.is_none()) {
              return slot_through_signals(channel, [&] { return channel.acquire_slot(); });
            }
            const Stream on = stream_from(stream);
            py::gil_scoped_release released;
            return slot_of(channel, channel.acquire_slot(on));
          },
          "stream"_a = py::none(), "Producer: waits for a free slot.")
      .def(
          "publish",
          [](Channel& channel, py::handle stream) {
            host_or_stream<void>(
                stream, [&] { channel.publish(); }, [&](Stream on) { channel.publish(on); });
          },
          "stream"_a = py::none())
      .def(
          "acquire",
          [](Channel& channel, py::handle stream) {
            if (stream.is_none()) {
              return slot_through_signals(channel, [&] { return channel.acquire(); });
            }
            const Stream on = stream_from(stream);
            py::gil_scoped_release released;
            return slot_of(channel, channel.acquire(on));
          },
          "stream"_a = py::none(), "Consumer: waits for the next item.")
      .def(
          "release",
          [](Channel& channel, py::handle stream) {
            host_or_stream<void>(
                stream, [&] { channel.release(); }, [&](Stream on) { channel.release(on); });
          },
          "stream"_a = py::none())
      .def("__repr__", [](const Channel& channel) {
        return "<gpumem.Channel '" + channel.name() + "' " +
               (channel.producer() ? "producer" : "consumer") + ">";
      });
}

}  // namespace

held_lock make_lock(Client& client, const std::string& name, Mode mode) {
  return held_lock(new Lock(client.lock(name, {.mode = mode})));
}

held_barrier make_barrier(Client& client, const std::string& name, std::uint32_t parties,
                          Mode mode) {
  return held_barrier(new Barrier(client.barrier(name, parties, {.mode = mode})));
}

held_channel make_channel(Client& client, const std::string& name, ChannelRole role,
                          const ChannelOptions& options) {
  return {new Channel(client.channel(name, role, options)), delete_without_gil<Channel>{}};
}

void bind_sync(py::module_& module) {
  bind_lock(module);
  bind_barrier(module);
  bind_channel(module);
}

}  // namespace gpumem::python
