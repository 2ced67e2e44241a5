#include "client.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include "buffer.hpp"
#include "daemon_reports.hpp"
#include "gpumem/gpumem.hpp"
#include "optional_names.hpp"
#include "reservation.hpp"
#include "streams.hpp"
#include "sync.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace gpumem::python {

namespace {

using optional_name = std::optional<std::string>;

shared_buffer allocate(Client& client, std::size_t bytes, int device, const optional_name& name,
                       const optional_name& pool, py::handle stream, Mode mode) {
  const AllocateOptions options{.device = device,
                                .name = name_or_none(name, "allocation name"),
                                .pool = name_or_none(pool, "pool name"),
                                .stream = stream_from(stream),
                                .mode = mode};
  py::gil_scoped_release released;
  return shared_buffer(client.allocate(bytes, options));
}

shared_buffer open(Client& client, const std::string& name, bool read_only, py::handle stream) {
  const OpenOptions options{.access = read_only ? Access::read_only : Access::read_write,
                            .stream = stream_from(stream)};
  py::gil_scoped_release released;
  return shared_buffer(client.open(name, options));
}

held_channel channel(Client& client, const std::string& name, ChannelRole role, std::uint32_t slots,
                     std::size_t slot_bytes, std::uint32_t consumers, int device, Mode mode) {
  return make_channel(client, name, role,
                      {.slots = slots,
                       .slot_bytes = slot_bytes,
                       .consumers = consumers,
                       .device = device,
                       .mode = mode});
}

// Seconds, as Python counts time; milliseconds for ConnectOptions. Checked here, where the
// error can still be a ValueError.
std::optional<std::chrono::milliseconds> reconnect_from(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  if (std::isnan(*seconds) || *seconds < 0) {
    throw py::value_error("reconnect_for must be a number of seconds, not negative");
  }
  constexpr double kLongest = 365.0 * 24 * 3600;  // beyond any restart: as good as for ever
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(std::min(*seconds, kLongest)));
}

}  // namespace

void bind_client(py::module_& module) {
  py::class_<Client> type(module, "Client",
                          "A session with gpumemd. Buffers, reservations, locks, barriers and "
                          "channels keep it open after the Client object is gone.");
  type.def("allocate", &allocate, "nbytes"_a, py::kw_only(), "device"_a = kHost,
           "name"_a = py::none(), "pool"_a = py::none(), "stream"_a = py::none(),
           "mode"_a = py::none(),
           "New memory: named, other processes can open() it (who: `mode`, e.g. 0o640; None: "
           "the daemon's default). CUDA buffers are ready in stream order on `stream`, and "
           "released in its order.")
      .def("open", &open, "name"_a, py::kw_only(), "read_only"_a = false, "stream"_a = py::none(),
           "Opens a named allocation of any process.")
      .def("ping", &Client::ping, py::call_guard<py::gil_scoped_release>())
      .def_property(
          "own_objects_only", &Client::opens_own_objects_only,
          [](Client& client, bool only) { client.open_own_objects_only(only); },
          "True: this client's opens by name (open, open_reservation, lock, barrier, channel) "
          "join only objects its uid made; another user's of the name raises PermissionError "
          "instead of being joined. Names are first come, first served: another user may take "
          "yours first, with a mode that lets you in.")
      .def("lock", &make_lock, "name"_a, py::kw_only(), "mode"_a = py::none(),
           py::call_guard<py::gil_scoped_release>(),
           "The lock of that name, made on first use (with `mode`, as for allocate).")
      .def("barrier", &make_barrier, "name"_a, "parties"_a, py::kw_only(), "mode"_a = py::none(),
           py::call_guard<py::gil_scoped_release>(), "Joins the barrier as one of its parties.")
      .def("channel", &channel, "name"_a, "role"_a, py::kw_only(), "slots"_a = 4,
           "slot_bytes"_a = 0, "consumers"_a = 1, "device"_a = kHost, "mode"_a = py::none(),
           py::call_guard<py::gil_scoped_release>(),
           "Joins the channel as its producer or one of its consumers.")
      .def("reset", &Client::reset, "name"_a, "parties"_a = 0,
           py::call_guard<py::gil_scoped_release>(),
           "An operator's reset, as `gpumemctl reset`: a lock is released and usable again; a "
           "barrier or channel starts over with `parties` (0: those attached).")
      .def("status", &status, "As `gpumemctl status --json`.")
      .def("stats", &stats, "As `gpumemctl stats --json`: {'pools': [...], 'clients': N}.")
      .def("clients", &clients, "As `gpumemctl clients --json`.")
      .def("allocations", &allocations, "As `gpumemctl allocations --json`.")
      .def("reservations", &reservations, "As `gpumemctl reservations --json`.")
      .def("sync_objects", &sync_objects, "As `gpumemctl locks --json`.")
      .def("usage", &usage, "As `gpumemctl quotas --json`: use against quota per uid.")
      .def_property_readonly("id", &Client::id, "this session's id in the daemon")
      .def_property_readonly("socket_path", &Client::socket_path)
      .def("__repr__", [](const Client& client) {
        return "<gpumem.Client id=" + std::to_string(client.id()) + " socket='" +
               client.socket_path() + "'>";
      });
  bind_reservation_calls(type);

  module.def(
      "connect",
      [](const std::string& socket_path, const std::string& label,
         std::optional<double> reconnect_for) {
        if (socket_path.find('\0') != std::string::npos) {
          throw py::value_error("connect: socket_path has an embedded null byte");
        }
        return Client::connect({.socket_path = socket_path,
                                .label = label,
                                .reconnect_for = reconnect_from(reconnect_for)});
      },
      "socket_path"_a, "label"_a, "reconnect_for"_a = py::none(),
      py::call_guard<py::gil_scoped_release>(),
      "Connects to gpumemd (empty socket_path: $GPUMEM_SOCKET, then the default locations). "
      "reconnect_for: seconds a call whose connection broke tries to reconnect and resume "
      "(0: never; None: $GPUMEM_RECONNECT_MS, else 10).");
}

}  // namespace gpumem::python
