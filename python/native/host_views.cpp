#include "host_views.hpp"

#include <exception>
#include <memory>

namespace py = pybind11;

namespace gpumem::python {

int fill_host_view(PyObject* self, Py_buffer* view, int flags, range_of_object range_of) {
  try {
    exported_range range = range_of(py::handle(self));
    if (range.device != kHost) {
      throw py::buffer_error(
          "CUDA memory has no host view: use DLPack (torch.from_dlpack, cupy.from_dlpack, "
          "jax.dlpack.from_dlpack) or __cuda_array_interface__");
    }
    if (PyBuffer_FillInfo(view, self, range.data, static_cast<Py_ssize_t>(range.size),
                          range.read_only ? 1 : 0, flags) != 0) {
      return -1;
    }
    view->internal = new std::shared_ptr<const void>(std::move(range.owner));
    return 0;
  } catch (py::error_already_set& error) {
    error.restore();
  } catch (const py::builtin_exception& error) {
    error.set_error();
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_BufferError, error.what());
  }
  view->obj = nullptr;
  return -1;
}

void release_host_view(PyObject* /*self*/, Py_buffer* view) {
  delete static_cast<std::shared_ptr<const void>*>(view->internal);
}

}  // namespace gpumem::python
