#pragma once
/// @file
/// @brief Running C++ that may block (a round trip to gpumemd) without holding the GIL.

#include <pybind11/pybind11.h>

#include <memory>

namespace gpumem::python {

inline bool interpreter_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

/// @brief Runs @p work without the GIL when this thread holds it, so that other Python
/// threads go on meanwhile. A DLPack deleter may run on a thread that never held the GIL:
/// then @p work simply runs. While the interpreter shuts down the GIL is kept, as a thread
/// that lets go of it then may never get it back.
template <class Work>
void without_gil(Work&& work) {
  if (PyGILState_Check() != 0 && !interpreter_finalizing()) {
    pybind11::gil_scoped_release released;
    work();
  } else {
    work();
  }
}

/// @brief Deletes with the GIL let go: the destructors of buffers, locks, barriers and
/// channels tell the daemon, one round trip each.
template <class T>
struct delete_without_gil {
  void operator()(T* object) const noexcept {
    without_gil([object] { delete object; });
  }
};

template <class T>
using gil_free_ptr = std::unique_ptr<T, delete_without_gil<T>>;

}  // namespace gpumem::python
