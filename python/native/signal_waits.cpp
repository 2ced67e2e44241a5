#include "signal_waits.hpp"

#include <atomic>

#include "gil.hpp"

namespace gpumem::python {

namespace {

std::atomic<unsigned long> main_thread{0};

}  // namespace

void remember_the_main_thread() {
  namespace py = pybind11;
  main_thread =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
}

bool python_handler_raised() noexcept {
  // Other threads run no handlers; and a thread that takes the GIL while the interpreter shuts
  // down may never get it back.
  if (PyThread_get_thread_ident() != main_thread || interpreter_finalizing()) return false;
  const PyGILState_STATE state = PyGILState_Ensure();
  // One that raised before (a wait that goes on, as when the daemon gave its turn up) keeps its
  // exception: handlers must not run with one set.
  const bool raised = PyErr_Occurred() != nullptr || PyErr_CheckSignals() != 0;
  PyGILState_Release(state);
  return raised;
}

}  // namespace gpumem::python
