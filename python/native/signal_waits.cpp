#include "signal_waits.hpp"

#include "gil.hpp"

namespace gpumem::python {

bool python_handler_raised() noexcept {
  // A thread that takes the GIL while the interpreter shuts down may never get it back.
  if (interpreter_finalizing()) return false;
  const PyGILState_STATE state = PyGILState_Ensure();
  const bool raised = PyErr_CheckSignals() != 0;
  PyGILState_Release(state);
  return raised;
}

}  // namespace gpumem::python
