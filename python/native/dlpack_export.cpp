#include "dlpack_export.hpp"

#include <cstdint>
#include <memory>
#include <string>

#include "dlpack.hpp"
#include "streams.hpp"

namespace py = pybind11;

namespace gpumem::python {

namespace {

using namespace dlpack;

DLDevice device_of(const shared_buffer& buffer) {
  if (buffer.device() == kHost) return {kDLCPU, 0};
  return {kDLCUDA, buffer.device()};
}

// What a capsule owns: the managed tensor, its shape and strides, and a reference to the
// memory. The deleter may run on any thread, with or without the GIL.
template <class Managed>
struct tensor_export {
  Managed managed{};
  std::shared_ptr<Buffer> memory;
  std::int64_t shape = 0;
  std::int64_t stride = 1;

  static void remove(Managed* self) { delete static_cast<tensor_export*>(self->manager_ctx); }
};

template <class Managed>
Managed* make_export(const shared_buffer& buffer, const std::shared_ptr<Buffer>& memory) {
  auto* made = new tensor_export<Managed>{};
  made->memory = memory;
  made->shape = static_cast<std::int64_t>(memory->size());
  DLTensor& tensor = made->managed.dl_tensor;
  tensor.data = memory->data();
  tensor.device = device_of(buffer);
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

bool wants_versioned(py::handle max_version) {
  if (max_version.is_none()) return false;
  const auto version = max_version.cast<py::tuple>();
  if (version.size() != 2) throw py::type_error("__dlpack__: max_version must be (major, minor)");
  return version[0].cast<std::uint32_t>() >= kMajorVersion;
}

void check_device(const shared_buffer& buffer, py::handle dl_device) {
  if (dl_device.is_none()) return;
  const auto asked = dl_device.cast<py::tuple>();
  const DLDevice ours = device_of(buffer);
  if (asked.size() == 2 && asked[0].cast<int>() == ours.device_type &&
      asked[1].cast<int>() == ours.device_id) {
    return;
  }
  throw py::buffer_error("__dlpack__: the buffer lives on device (" +
                         std::to_string(ours.device_type) + ", " + std::to_string(ours.device_id) +
                         "); gpumem does not copy it elsewhere");
}

}  // namespace

py::tuple dlpack_device(const shared_buffer& buffer) {
  const DLDevice device = device_of(buffer);
  return py::make_tuple(static_cast<int>(device.device_type), device.device_id);
}

py::capsule dlpack_capsule(const shared_buffer& buffer, py::handle stream, py::handle max_version,
                           py::handle dl_device, py::handle copy) {
  const auto& memory = buffer.memory();
  if (!copy.is_none() && copy.cast<bool>()) {
    throw py::buffer_error("__dlpack__: gpumem shares its memory and makes no copies (copy=True)");
  }
  check_device(buffer, dl_device);
  const bool versioned = wants_versioned(max_version);
  if (buffer.device() != kHost) {
    if (auto consumer = dlpack_consumer_stream(stream)) {
      order_after(*consumer, buffer.stream(), buffer.device());
    }
  } else if (buffer.read_only() && !versioned) {
    // Host memory opened read-only is mapped without write permission: a consumer of DLPack
    // 0.x cannot be told, and its first write would kill the process.
    throw py::buffer_error(
        "__dlpack__: this host buffer is read-only and a DLPack 0.x consumer cannot be told; "
        "use a consumer of DLPack 1.0 (NumPy 2.1 or later), memoryview(buffer) or "
        "numpy.frombuffer(buffer)");
  }
  if (!versioned)
    return wrap<DLManagedTensor, kCapsuleName>(make_export<DLManagedTensor>(buffer, memory));
  auto* managed = make_export<DLManagedTensorVersioned>(buffer, memory);
  managed->version = {kMajorVersion, kMinorVersion};
  managed->flags = buffer.read_only() ? kFlagReadOnly : 0;
  return wrap<DLManagedTensorVersioned, kVersionedCapsuleName>(managed);
}

}  // namespace gpumem::python
