#pragma once
/// @file
/// @brief Host waits that Ctrl-C ends, as it ends Python's own blocking calls
/// (threading.Lock.acquire, time.sleep).
///
/// Python runs signal handlers between bytecodes, so a thread that waits in C++ for another
/// process would otherwise see Ctrl-C only when the wait is over: never, if that process never
/// comes. Each wait here runs within sync::signals_end_waits: a signal that cuts its sleep short
/// has python_handler_raised() run Python's handlers, and the wait ends only if one raised
/// (KeyboardInterrupt), with the object as it was; a handler that raises nothing leaves the wait
/// in its place until its deadline. Only the main thread runs handlers; a signal that reaches
/// another thread's wait leaves it waiting.

#include <pybind11/pybind11.h>

#include <type_traits>

#include "gpumem/shared/sync/signals_end_waits.hpp"

namespace gpumem::python {

/// @brief Notes which thread is Python's main thread, the only one that runs signal handlers.
/// Called once, by the module's initialisation.
void remember_the_main_thread();

/// @brief On the main thread, runs Python's handlers of the signals that came, taking the GIL
/// for them: whether one raised (or had raised already). Its exception stays set, for the
/// caller of the wait to raise. Python code runs in it, so the wait that asks must hold nothing
/// that code could want (a reservation's turn: see `wait_version`).
bool python_handler_raised() noexcept;

/// @brief Raises the exception a handler raised, if one did; the caller holds the GIL.
inline void raise_what_a_handler_raised() {
  if (PyErr_Occurred() != nullptr) throw pybind11::error_already_set();
}

/// @brief Runs @p wait, which lets go of the GIL itself, where a signal whose handler raises
/// ends it; then raises what the handler raised, also where the wait ended by throwing (a
/// reservation's sleep or wake, which throws Error(timed_out) then): Ctrl-C is what the caller
/// asked for, whatever the wait had to say.
template <class Wait>
auto wait_through_signals(Wait&& wait) {
  try {
    const sync::signals_end_waits ended_by(python_handler_raised);
    if constexpr (std::is_void_v<std::invoke_result_t<Wait&>>) {
      wait();
      raise_what_a_handler_raised();
    } else {
      auto result = wait();
      raise_what_a_handler_raised();
      return result;
    }
  } catch (...) {
    raise_what_a_handler_raised();
    throw;
  }
}

}  // namespace gpumem::python
