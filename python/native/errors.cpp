#include "errors.hpp"

#include "gpumem/gpumem.hpp"

namespace py = pybind11;

namespace gpumem::python {

namespace {

// A new reference, kept for the life of the process like the module that owns it.
PyObject* error_type = nullptr;

void raise(const gpumem::Error& error) {
  py::object raised = py::reinterpret_borrow<py::object>(error_type)(py::str(error.what()));
  raised.attr("code") = py::cast(error.status());
  PyErr_SetObject(error_type, raised.ptr());
}

}  // namespace

void bind_errors(py::module_& module) {
  py::enum_<errc> codes(module, "errc", "What failed: the status codes of gpumemd and libgpumem.");
#define GPUMEM_X(name, number, text) codes.value(#name, errc::name, text);
  GPUMEM_ERRC_TABLE(GPUMEM_X)
#undef GPUMEM_X

  error_type = PyErr_NewExceptionWithDoc(
      "gpumem.Error",
      "Every failure of gpumem: .code is a gpumem.errc member, str() names the object and the "
      "cause (in the daemon's words where the daemon refused).",
      PyExc_OSError, nullptr);
  if (error_type == nullptr) throw py::error_already_set();
  // An Error made by Python code has no code.
  if (PyObject_SetAttrString(error_type, "code", Py_None) != 0) throw py::error_already_set();
  module.attr("Error") = py::reinterpret_borrow<py::object>(error_type);

  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const gpumem::Error& error) {
      raise(error);
    }
  });
}

}  // namespace gpumem::python
