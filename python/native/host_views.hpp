#pragma once
/// @file
/// @brief The buffer protocol for host memory: a memoryview (read-only where the memory is)
/// whose Py_buffer holds the memory's owner, so that releasing the object that gave it never
/// unmaps the memory under a live view. CUDA memory refuses, pointing to DLPack.

#include <pybind11/pybind11.h>

#include "exported_range.hpp"

namespace gpumem::python {

/// What an object exports now; throws (BufferError) when it has nothing to export.
using range_of_object = exported_range (*)(pybind11::handle self);

int fill_host_view(PyObject* self, Py_buffer* view, int flags, range_of_object range_of);
void release_host_view(PyObject* self, Py_buffer* view);

/// @brief Gives @p type (a class declared with py::buffer_protocol()) slots that export
/// range_of(self): pybind11's own buffer protocol keeps no owner with the view.
template <range_of_object range_of>
void enable_host_views(pybind11::handle type) {
  auto* heap_type = reinterpret_cast<PyHeapTypeObject*>(type.ptr());
  heap_type->as_buffer.bf_getbuffer = [](PyObject* self, Py_buffer* view, int flags) {
    return fill_host_view(self, view, flags, range_of);
  };
  heap_type->as_buffer.bf_releasebuffer = release_host_view;
}

}  // namespace gpumem::python
