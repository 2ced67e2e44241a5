#include "argument_types.hpp"

namespace py = pybind11;

namespace gpumem::python {

std::string module_of_type(py::handle object) {
  py::handle type(reinterpret_cast<PyObject*>(Py_TYPE(object.ptr())));
  return py::str(py::getattr(type, "__module__", py::str("")));
}

bool is_numpy(py::handle object, const char* name) {
  // NumPy's scalar types are C types: their tp_name carries the module.
  return Py_TYPE(object.ptr())->tp_name == std::string("numpy.") + name;
}

bool is_bool(py::handle object) {
  return PyBool_Check(object.ptr()) != 0 || is_numpy(object, "bool_") || is_numpy(object, "bool");
}

}  // namespace gpumem::python
