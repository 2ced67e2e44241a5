#pragma once
/// @file
/// @brief Letting a signal end a host wait, for programs whose signal handlers run only once
/// the wait returns.
///
/// Python runs its signal handlers between bytecodes, so while a thread waits in C++ for a
/// lock, a barrier's round or a channel's item, Ctrl-C only sets a flag that nobody reads until
/// the wait is over: for ever, if the other process never comes. Python's module sets this
/// scope around each host wait. A signal whose handler interrupts the wait's sleep (the handler
/// was installed without SA_RESTART, as Python's are) then ends the wait: a counter's wait
/// returns wait_status::interrupted, a lock's gives up its place in the queue as a timeout does
/// and returns acquire_status::interrupted. The caller runs the handlers and, unless one of them
/// raised, waits again. A signal that comes while the wait spins, before it sleeps, ends
/// nothing; the next one does. Without the scope, signals never end a wait.

namespace gpumem::sync {

class signals_end_waits {
 public:
  signals_end_waits() noexcept;
  ~signals_end_waits();
  signals_end_waits(const signals_end_waits&) = delete;
  signals_end_waits& operator=(const signals_end_waits&) = delete;

  /// @brief Whether a scope lives on this thread.
  static bool here() noexcept;

 private:
  bool outer_;  ///< whether a scope lived here before this one
};

}  // namespace gpumem::sync
