#include "buffer.hpp"

#include <optional>
#include <string>
#include <utility>

#include "dlpack_export.hpp"
#include "gil.hpp"
#include "host_views.hpp"
#include "streams.hpp"

namespace py = pybind11;

namespace gpumem::python {

std::shared_ptr<Buffer> share(Buffer buffer) {
  return {new Buffer(std::move(buffer)), delete_without_gil<Buffer>{}};
}

shared_buffer::shared_buffer(Buffer buffer) : shared_buffer(share(std::move(buffer)), true) {}

shared_buffer shared_buffer::borrowed(std::shared_ptr<Buffer> memory) {
  return {std::move(memory), false};
}

shared_buffer::shared_buffer(std::shared_ptr<Buffer> memory, bool owned)
    : memory_(std::move(memory)),
      owned_(owned),
      size_(memory_->size()),
      id_(memory_->id()),
      device_(memory_->device()),
      read_only_(memory_->access() == Access::read_only) {}

const std::shared_ptr<Buffer>& shared_buffer::memory() const {
  if (memory_ == nullptr) throw py::buffer_error("the gpumem.Buffer was released");
  return memory_;
}

exported_range shared_buffer::exported() const {
  const auto& memory = this->memory();
  return {memory->data(), memory->size(), device_, read_only_, memory};
}

std::uintptr_t shared_buffer::pointer() const {
  return reinterpret_cast<std::uintptr_t>(memory()->data());
}

Stream shared_buffer::stream() const {
  return memory()->stream();
}

void shared_buffer::hold_until_deallocated() {
  held_until_deallocated_ = memory();
}

void shared_buffer::release(py::handle last_use) {
  if (memory_ == nullptr) return;
  const bool given_stream = !last_use.is_none();
  const Stream stream = given_stream ? stream_from(last_use) : nullptr;
  // Only the sole holder of memory it owns lets go now; an export still holding it (a tensor
  // made through DLPack, a memoryview, this object for __cuda_array_interface__ consumers)
  // keeps it until that export is gone, and then frees it on the buffer's stream: that stream
  // waits for last_use first, ordered before memory_ is given up so that a failure keeps it.
  const bool still_held = memory_.use_count() != 1;
  if (owned_ && still_held && given_stream && device_ != kHost) {
    order_after(memory_->stream(), stream, device_);
  }
  std::shared_ptr<Buffer> memory = std::move(memory_);
  if (!owned_ || still_held) return;
  py::gil_scoped_release released;
  if (given_stream) {
    memory->release(stream);
  } else {
    memory->release();
  }
}

namespace {

std::string describe(const shared_buffer& buffer) {
  std::string text = "<gpumem.Buffer id=" + std::to_string(buffer.id()) +
                     " size=" + std::to_string(buffer.size()) +
                     " device=" + device_name(buffer.device());
  if (buffer.read_only()) text += " read_only";
  if (buffer.released()) text += " released";
  return text + ">";
}

// CuPy and Numba keep a reference to the object that gave them the interface, not to the
// memory: this object holds the memory for them until it is deallocated.
py::dict cuda_array_interface(shared_buffer& buffer) {
  if (buffer.device() == kHost) {
    throw py::attribute_error(
        "__cuda_array_interface__: a host buffer is not CUDA memory (use the buffer protocol "
        "or DLPack)");
  }
  buffer.hold_until_deallocated();
  py::dict interface;
  interface["shape"] = py::make_tuple(buffer.size());
  interface["typestr"] = "|u1";
  interface["data"] = py::make_tuple(buffer.pointer(), buffer.read_only());
  interface["strides"] = py::none();
  interface["version"] = 3;
  interface["stream"] = array_interface_stream(buffer.stream());
  return interface;
}

exported_range exported_buffer(py::handle self) {
  return self.cast<const shared_buffer&>().exported();
}

// For CUDA memory the consumer's stream first waits for the work queued on the buffer's stream.
py::capsule buffer_dlpack(const shared_buffer& buffer, py::handle stream, py::handle max_version,
                          py::handle dl_device, py::handle copy) {
  const exported_range range = buffer.exported();
  const std::optional<Stream> consumer = dlpack_consumer_stream(stream, range.device);
  py::capsule capsule = dlpack_capsule(range, max_version, dl_device, copy);
  if (consumer) order_after(*consumer, buffer.stream(), range.device);
  return capsule;
}

}  // namespace

void bind_buffer(py::module_& module) {
  py::class_<shared_buffer> type(module, "Buffer", py::buffer_protocol(),
                                 "Memory shared through gpumemd. Exported without copies "
                                 "through DLPack, the buffer protocol (host) and "
                                 "__cuda_array_interface__ (CUDA).");
  enable_host_views<exported_buffer>(type);

  type.def_property_readonly("size", &shared_buffer::size, "bytes")
      .def_property_readonly("id", &shared_buffer::id,
                             "the daemon's id of the allocation, the same in every process")
      .def_property_readonly("device", &shared_buffer::device,
                             "gpumem.HOST (-1) or the CUDA device number")
      .def_property_readonly("read_only", &shared_buffer::read_only)
      .def_property_readonly("released", &shared_buffer::released)
      .def_property_readonly("ptr", &shared_buffer::pointer,
                             "the address: in this process (host) or on the device (CUDA)")
      .def("release", &shared_buffer::release, py::arg("stream") = py::none(),
           "Lets go of the memory after the work queued on stream (default: the buffer's); "
           "tensors and views made from it keep it until they are gone, and CUDA memory is "
           "then freed after the work queued on stream too (an event: the host never "
           "waits). Once "
           "__cuda_array_interface__ has been read, the Buffer object keeps it until the "
           "object is deallocated: its consumers (CuPy, Numba) hold the object, not the "
           "memory.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](shared_buffer& buffer, py::args) { buffer.release(py::none()); })
      .def("__dlpack__", &buffer_dlpack, py::arg("stream") = py::none(), py::kw_only(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none())
      .def("__dlpack_device__",
           [](const shared_buffer& buffer) { return dlpack_device(buffer.device()); })
      .def_property_readonly("__cuda_array_interface__", &cuda_array_interface,
                             "CUDA buffers. Reading it makes this object hold the memory "
                             "until it is deallocated, release() notwithstanding.")
      .def("__repr__", &describe);
}

}  // namespace gpumem::python
