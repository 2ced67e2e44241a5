#include "daemon_reports.hpp"

#include <string>
#include <vector>

#include "records.hpp"  // gpumemctl's field descriptions (client/gpumemctl)

namespace py = pybind11;

namespace gpumem::python {

namespace {

using gpumemctl::json;

py::object to_python(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return py::none();
    case json::value_t::boolean:
      return py::bool_(value.get<bool>());
    case json::value_t::number_integer:
      return py::int_(value.get<std::int64_t>());
    case json::value_t::number_unsigned:
      return py::int_(value.get<std::uint64_t>());
    case json::value_t::number_float:
      return py::float_(value.get<double>());
    case json::value_t::string:
      return py::str(value.get_ref<const std::string&>());
    case json::value_t::array: {
      py::list list;
      for (const auto& each : value) list.append(to_python(each));
      return list;
    }
    case json::value_t::object: {
      py::dict dict;
      for (const auto& [key, each] : value.items()) dict[py::str(key)] = to_python(each);
      return dict;
    }
    default:
      throw py::type_error("gpumemctl field of an unexpected JSON type: " + value.dump());
  }
}

// Asks the daemon without the GIL; builds the Python objects with it.
template <class Ask>
auto without_gil_ask(Ask ask) {
  py::gil_scoped_release released;
  return ask();
}

}  // namespace

py::dict status(Client& client) {
  const gpumemctl::daemon_status status{without_gil_ask([&] { return client.stats(); }),
                                        client.socket_path()};
  return to_python(gpumemctl::record_json(status, gpumemctl::kStatusFields)).cast<py::dict>();
}

py::dict stats(Client& client) {
  const Stats stats = without_gil_ask([&] { return client.stats(); });
  const json document{{"pools", gpumemctl::records_json(stats.pools, gpumemctl::kPoolFields)},
                      {"clients", stats.clients}};
  return to_python(document).cast<py::dict>();
}

py::list clients(Client& client) {
  std::vector<gpumemctl::listed_client> all;
  for (const auto& each : without_gil_ask([&] { return client.clients(); })) {
    all.push_back({each, each.id == client.id()});
  }
  return to_python(gpumemctl::records_json(all, gpumemctl::kClientFields)).cast<py::list>();
}

py::list allocations(Client& client) {
  return to_python(gpumemctl::records_json(
                       without_gil_ask([&] { return gpumemctl::list_allocations(client); }),
                       gpumemctl::kAllocationFields))
      .cast<py::list>();
}

py::list reservations(Client& client) {
  return to_python(gpumemctl::records_json(without_gil_ask([&] { return client.reservations(); }),
                                           gpumemctl::kReservationFields))
      .cast<py::list>();
}

py::list usage(Client& client) {
  return to_python(gpumemctl::records_json(without_gil_ask([&] { return client.usage(); }),
                                           gpumemctl::kUsageFields))
      .cast<py::list>();
}

py::list sync_objects(Client& client) {
  return to_python(gpumemctl::records_json(without_gil_ask([&] { return client.sync_objects(); }),
                                           gpumemctl::kSyncFields))
      .cast<py::list>();
}

}  // namespace gpumem::python
