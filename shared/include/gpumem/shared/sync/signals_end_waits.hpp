#pragma once
/// @file
/// @brief Letting a signal end a host wait, for programs whose signal handlers run only once
/// the wait returns.
///
/// Python runs its signal handlers between bytecodes, so while a thread waits in C++ for a lock,
/// a barrier's round, a channel's item, a reservation's version or the end of its sleep or wake,
/// Ctrl-C only sets a flag that nobody reads until the wait is over: for ever, if the other
/// process never comes. Python's module sets this scope around each such wait, with a check that
/// runs Python's handlers (or, for a reservation's version, whose wait holds the reservation's
/// turn, one that says yes to any signal: the handlers run once the wait returns, the turn let
/// go). When a signal cuts the wait's sleep short (a timed sleep on one word always; an untimed
/// one, and any sleep of a barrier's or channel's wait, when the handler was installed without
/// SA_RESTART, as Python's are), the wait asks the check and ends only if a handler raised: a
/// counter's wait returns wait_status::interrupted, a lock's gives up its place in the queue as a
/// timeout does (a turn that came meanwhile it passes on at once, a dead holder's news with it)
/// and returns acquire_status::interrupted, Reservation::wait_version returns false, and a
/// reservation's sleep or wake (Reservation::sleep and wake, sleep_reservation,
/// wake_reservation) throws Error(timed_out), the sleep or wake going on in gpumemd. A handler
/// that raises nothing leaves the wait as it was, its place and its deadline kept. A signal that
/// comes while the wait is not asleep (its first spin; a reservation's sleep or wake asking the
/// daemon, every 50 ms at most; or, where futex_waitv is refused, between the 10 ms sleeps of a
/// counter's wait, which re-checks the broken flag) cuts no sleep short: it is handled at the
/// next signal, or once the wait returns. Without the scope, signals never end a wait.

namespace gpumem::sync {

class signals_end_waits {
 public:
  /// Asked on the waiting thread, which may hold locks of the object it waits for (a
  /// reservation's turn in Python's module): whether the wait ends. It must not wait for anyone
  /// who could be waiting for those.
  using check = bool (*)() noexcept;

  explicit signals_end_waits(check handler_raised) noexcept;
  ~signals_end_waits();
  signals_end_waits(const signals_end_waits&) = delete;
  signals_end_waits& operator=(const signals_end_waits&) = delete;

  /// @brief Whether a signal that cut this thread's sleep short ends its wait: the check of the
  /// innermost scope on this thread; false without one.
  static bool signal_ends_wait() noexcept;

 private:
  check outer_;  ///< the scope's check that lived here before this one, if any
};

}  // namespace gpumem::sync
