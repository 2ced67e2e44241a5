#include "streams.hpp"

#include <cstdint>
#include <string>

#include "argument_types.hpp"

#ifdef GPUMEM_WITH_CUDA
#include <mutex>
#include <unordered_map>

#include "gpumem/shared/cuda/driver.hpp"
#endif

namespace py = pybind11;

namespace gpumem::python {

namespace {

Stream stream_at(std::uintptr_t handle) {
  return reinterpret_cast<Stream>(handle);
}

std::uintptr_t stream_handle(py::handle number, const char* what) {
  const auto value = number.cast<long long>();
  if (value < 0) throw py::value_error(std::string(what) + " may not be negative");
  return static_cast<std::uintptr_t>(value);
}

bool is_int(py::handle object) {
  return PyLong_Check(object.ptr()) != 0 && PyBool_Check(object.ptr()) == 0;
}

bool module_is(const std::string& module, const std::string& package) {
  return module == package || module.starts_with(package + ".");
}

// Special stream handles of the driver API (cuda.h's CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
constexpr std::uintptr_t kLegacyStream = 1;
constexpr std::uintptr_t kPerThreadStream = 2;

}  // namespace

Stream stream_from(py::handle object) {
  if (object.is_none()) return nullptr;
  if (is_int(object)) return stream_at(stream_handle(object, "a stream"));
  if (py::hasattr(object, "__cuda_stream__")) {
    // The protocol is a method returning (version, handle); early drafts made it an attribute.
    py::object protocol = object.attr("__cuda_stream__");
    if (PyCallable_Check(protocol.ptr()) != 0) protocol = protocol();
    const auto pair = protocol.cast<py::tuple>();
    if (pair.size() != 2) throw py::type_error("__cuda_stream__ must give (version, handle)");
    return stream_at(stream_handle(pair[1], "__cuda_stream__'s handle"));
  }
  const std::string module = module_of_type(object);
  if (module_is(module, "torch") && py::hasattr(object, "cuda_stream")) {
    return stream_at(stream_handle(object.attr("cuda_stream"), "torch's cuda_stream"));
  }
  if (module_is(module, "cupy") && py::hasattr(object, "ptr")) {
    return stream_at(stream_handle(object.attr("ptr"), "CuPy's stream ptr"));
  }
  throw py::type_error(
      "stream= takes None, an int (cudaStream_t), an object with __cuda_stream__, a "
      "torch.cuda.Stream or a CuPy stream, not " +
      std::string(py::str(py::repr(object))));
}

std::optional<Stream> dlpack_consumer_stream(py::handle stream, int device) {
  if (!stream.is_none() && !is_int(stream)) {
    throw py::type_error("__dlpack__: stream must be None or an int");
  }
  if (device == kHost) return std::nullopt;
  if (stream.is_none()) return stream_at(kLegacyStream);
  const auto value = stream.cast<long long>();
  if (value == -1) return std::nullopt;
  if (value <= 0) {
    throw py::value_error("__dlpack__: stream " + std::to_string(value) +
                          " is not a CUDA stream (0 is ambiguous; 1 is the legacy default "
                          "stream, 2 the per-thread default stream)");
  }
  return stream_at(static_cast<std::uintptr_t>(value));
}

std::uintptr_t array_interface_stream(Stream stream) noexcept {
  return stream == nullptr ? kLegacyStream : reinterpret_cast<std::uintptr_t>(stream);
}

#ifdef GPUMEM_WITH_CUDA

namespace {

void check(CUresult status, const char* call) {
  if (status != CUDA_SUCCESS) {
    throw Error(errc::cuda_error, std::string(call) + ": " + cuda::describe(status));
  }
}

const cuda::driver_api& driver() {
  std::string why_not;
  const cuda::driver_api* loaded = cuda::driver(&why_not);
  if (loaded == nullptr) throw Error(errc::not_supported, "CUDA is unavailable here: " + why_not);
  return *loaded;
}

bool is_default_stream(CUstream stream) {
  const auto handle = reinterpret_cast<std::uintptr_t>(stream);
  return handle == 0 || handle == kLegacyStream || handle == kPerThreadStream;
}

// The default streams belong to the context current when they are used: for a buffer of
// device N that is N's primary context, the one the CUDA runtime (and so PyTorch, CuPy and
// JAX) and libgpumem use. Retained once per device for the life of the process, as the
// runtime does.
CUcontext primary_context(const cuda::driver_api& cu, int device) {
  static std::mutex mutex;
  static std::unordered_map<int, CUcontext> retained;
  std::scoped_lock hold(mutex);
  if (auto found = retained.find(device); found != retained.end()) return found->second;
  CUdevice handle = 0;
  check(cu.cuDeviceGet(&handle, device), "cuDeviceGet");
  CUcontext context = nullptr;
  check(cu.cuDevicePrimaryCtxRetain(&context, handle), "cuDevicePrimaryCtxRetain");
  retained.emplace(device, context);
  return context;
}

CUcontext context_of(const cuda::driver_api& cu, CUstream stream, int device) {
  if (is_default_stream(stream)) return primary_context(cu, device);
  CUcontext context = nullptr;
  check(cu.cuStreamGetCtx(stream, &context), "cuStreamGetCtx");
  return context;
}

class current_context {
 public:
  current_context(const cuda::driver_api& cu, CUcontext context) : cu_(cu) {
    check(cu_.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent");
    if (previous_ != context) check(cu_.cuCtxSetCurrent(context), "cuCtxSetCurrent");
  }
  ~current_context() { cu_.cuCtxSetCurrent(previous_); }
  current_context(const current_context&) = delete;
  current_context& operator=(const current_context&) = delete;

 private:
  const cuda::driver_api& cu_;
  CUcontext previous_ = nullptr;
};

class event {
 public:
  explicit event(const cuda::driver_api& cu) : cu_(cu) {
    check(cu_.cuEventCreate(&event_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  // Destroying an event that a stream still waits on is allowed: the driver keeps it alive.
  ~event() { cu_.cuEventDestroy(event_); }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  CUevent get() const noexcept { return event_; }

 private:
  const cuda::driver_api& cu_;
  CUevent event_ = nullptr;
};

CUstream as_legacy_if_null(Stream stream) {
  return stream == nullptr ? reinterpret_cast<CUstream>(kLegacyStream) : stream;
}

}  // namespace

void order_after(Stream consumer, Stream producer, int device) {
  const CUstream waiting = as_legacy_if_null(consumer);
  const CUstream working = as_legacy_if_null(producer);
  if (waiting == working) return;  // one stream is ordered with itself
  const cuda::driver_api& cu = driver();
  current_context in_producer(cu, context_of(cu, working, device));
  event done(cu);
  check(cu.cuEventRecord(done.get(), working), "cuEventRecord");
  check(cu.cuStreamWaitEvent(waiting, done.get(), 0), "cuStreamWaitEvent");
}

#else

void order_after(Stream, Stream, int) {
  throw Error(errc::not_supported, "gpumem was built without CUDA: there are no CUDA buffers");
}

#endif

}  // namespace gpumem::python
