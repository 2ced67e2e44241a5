#include "dlpack_export.hpp"

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "argument_types.hpp"
#include "dlpack.hpp"

namespace py = pybind11;

namespace gpumem::python {

namespace {

using namespace dlpack;

DLDevice device_of(int device) {
  if (device == kHost) return {kDLCPU, 0};
  return {kDLCUDA, device};
}

// What a capsule owns: the managed tensor, its shape and strides, and a reference to the
// memory's owner. The deleter may run on any thread, with or without the GIL.
template <class Managed>
struct tensor_export {
  Managed managed{};
  std::shared_ptr<const void> owner;
  std::int64_t shape = 0;
  std::int64_t stride = 1;

  static void remove(Managed* self) { delete static_cast<tensor_export*>(self->manager_ctx); }
};

template <class Managed>
Managed* make_export(const exported_range& range) {
  auto* made = new tensor_export<Managed>{};
  made->owner = range.owner;
  made->shape = static_cast<std::int64_t>(range.size);
  DLTensor& tensor = made->managed.dl_tensor;
  tensor.data = range.data;
  tensor.device = device_of(range.device);
  tensor.ndim = 1;
  tensor.dtype = {kDLUInt, 8, 1};
  tensor.shape = &made->shape;
  tensor.strides = &made->stride;
  tensor.byte_offset = 0;
  made->managed.manager_ctx = made;
  made->managed.deleter = &tensor_export<Managed>::remove;
  return &made->managed;
}

// A capsule nobody consumed (still under its first name) deletes its tensor; a consumer
// renames it to "used_..." when it takes the tensor over.
template <class Managed, const char* name>
void delete_unconsumed(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, name) == 0) return;
  auto* managed = static_cast<Managed*>(PyCapsule_GetPointer(capsule, name));
  managed->deleter(managed);
}

template <class Managed, const char* name>
py::capsule wrap(Managed* managed) {
  PyObject* capsule = PyCapsule_New(managed, name, &delete_unconsumed<Managed, name>);
  if (capsule == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

/// @p pair, a tuple (or another sequence) of two integers: Python ints or anything with
/// __index__ (NumPy's), not bools.
/// @throws TypeError naming @p argument and what it takes otherwise.
std::pair<long long, long long> int_pair(py::handle pair, const char* argument, const char* takes) {
  const auto refuse = [&] {
    throw py::type_error(std::string("__dlpack__: ") + argument + " must be None or " + takes +
                         ", two ints");
  };
  if (PySequence_Check(pair.ptr()) == 0 || PyUnicode_Check(pair.ptr()) != 0 ||
      PyBytes_Check(pair.ptr()) != 0 || PySequence_Size(pair.ptr()) != 2) {
    PyErr_Clear();  // a sequence without a size
    refuse();
  }
  long long values[2] = {};
  for (Py_ssize_t index = 0; index < 2; ++index) {
    const auto item = py::reinterpret_steal<py::object>(PySequence_GetItem(pair.ptr(), index));
    if (!item) throw py::error_already_set();
    if (is_bool(item) || PyIndex_Check(item.ptr()) == 0) refuse();
    const auto number = py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()));
    if (!number) throw py::error_already_set();
    // Beyond long long, the number matches no version or device: as good as its largest.
    int overflow = 0;
    const long long read = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
    values[index] = overflow > 0 ? LLONG_MAX : overflow < 0 ? LLONG_MIN : read;
  }
  return {values[0], values[1]};
}

bool wants_versioned(py::handle max_version) {
  if (max_version.is_none()) return false;
  return int_pair(max_version, "max_version", "(major, minor)").first >= kMajorVersion;
}

void check_device(const exported_range& range, py::handle dl_device) {
  if (dl_device.is_none()) return;
  const auto [type, id] = int_pair(dl_device, "dl_device", "(device_type, device_id)");
  const DLDevice ours = device_of(range.device);
  if (type == ours.device_type && id == ours.device_id) return;
  throw py::buffer_error("__dlpack__: the memory lives on device (" +
                         std::to_string(ours.device_type) + ", " + std::to_string(ours.device_id) +
                         "); gpumem does not copy it elsewhere");
}

}  // namespace

py::tuple dlpack_device(int device) {
  const DLDevice dl_device = device_of(device);
  return py::make_tuple(static_cast<int>(dl_device.device_type), dl_device.device_id);
}

py::capsule dlpack_capsule(const exported_range& range, py::handle max_version,
                           py::handle dl_device, py::handle copy) {
  if (!copy.is_none() && !is_bool(copy)) {
    throw py::type_error("__dlpack__: copy must be None, True or False");
  }
  if (!copy.is_none() && PyObject_IsTrue(copy.ptr()) == 1) {
    throw py::buffer_error("__dlpack__: gpumem shares its memory and makes no copies (copy=True)");
  }
  check_device(range, dl_device);
  const bool versioned = wants_versioned(max_version);
  if (range.device == kHost && range.read_only && !versioned) {
    // Host memory mapped read-only has no write permission: a consumer of DLPack 0.x cannot
    // be told, and its first write would kill the process.
    throw py::buffer_error(
        "__dlpack__: this host memory is read-only and a DLPack 0.x consumer cannot be told; "
        "use a consumer of DLPack 1.0 (NumPy 2.1 or later) or the buffer protocol "
        "(memoryview, numpy.frombuffer)");
  }
  if (!versioned) return wrap<DLManagedTensor, kCapsuleName>(make_export<DLManagedTensor>(range));
  auto* managed = make_export<DLManagedTensorVersioned>(range);
  managed->version = {kMajorVersion, kMinorVersion};
  managed->flags = range.read_only ? kFlagReadOnly : 0;
  return wrap<DLManagedTensorVersioned, kVersionedCapsuleName>(managed);
}

}  // namespace gpumem::python
