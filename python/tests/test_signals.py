"""Ctrl-C reaches a thread that waits on the host for a lock, a barrier's round, a channel's
item, a reservation's version or the end of its sleep, as it reaches one in
threading.Lock.acquire: the wait ends with KeyboardInterrupt and the object works on for
everyone (a sleep goes on); a handler that raises nothing runs while the wait goes on, in its
place and to its deadline."""

from __future__ import annotations

import signal
import threading
import time

import pytest

import gpumem
import support
from test_reservations import commit_version, holds_pattern, reserve


def asleep(process: support.Process) -> bool:
    """Whether the process's main thread sleeps: in its wait, once past the wait's first spin."""
    with open(f"/proc/{process.pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "S"


def signal_and_answer(process: support.Process, number: int, answer: str) -> None:
    """Sends the signal once the process sleeps and reads its answer. A signal that comes while
    the wait is between two sleeps is handled only at the next signal: after 3 s of silence,
    SIGUSR2 (whose handler in the peer does nothing) nudges it, up to four times."""
    assert support.wait_until(lambda: asleep(process), 10), "the peer never went to sleep"
    time.sleep(0.05)  # asleep in the wait, not in writing its last line
    process.popen.send_signal(number)
    for _ in range(5):
        try:
            line = process.line(timeout=3)
        except AssertionError:  # silent, or ended
            if process.popen.poll() is not None:
                raise
            process.popen.send_signal(signal.SIGUSR2)
            continue
        assert line == answer
        return
    raise AssertionError(f"signal {number} had no answer, nudged four times")


def make_other_side(client: gpumem.Client, kind: str, name: str):
    if kind == "lock":
        lock = client.lock(name)
        assert lock.acquire() == gpumem.Acquired.acquired
        return lock
    if kind == "barrier":
        return client.barrier(name, 2)
    if kind == "channel":
        return client.channel(name, gpumem.ChannelRole.producer, slots=2, slot_bytes=64)
    return reserve(client, name)


def let_the_wait_end(kind: str, other) -> str:
    """Does what the peer waits for; what the peer then reports."""
    if kind == "lock":
        other.unlock()
        return "acquired"
    if kind == "barrier":
        assert other.arrive_and_wait() == gpumem.BarrierStatus.ok
        return "ok"
    if kind == "channel":
        assert other.acquire_slot().sequence == 0
        other.publish()
        return "item 0 ok"
    commit_version(other, seed=2)
    return "version 2"


@pytest.mark.parametrize("kind", ["lock", "barrier", "channel", "reservation"])
def test_ctrl_c_ends_a_host_wait_and_the_object_works_on(daemon, client, kind):
    name = f"interrupted-{kind}"
    other = make_other_side(client, kind, name)
    with support.python_peer("wait-through-signals", kind, name) as waiter:
        assert waiter.line() == "waiting"
        signal_and_answer(waiter, signal.SIGINT, "interrupted")
        assert waiter.line() == "waiting", "after KeyboardInterrupt the peer waits again"
        for _ in range(3):
            signal_and_answer(waiter, signal.SIGUSR1, "handled")
        assert waiter.popen.poll() is None
        expected = let_the_wait_end(kind, other)
        assert waiter.line() == f"done {expected}", "a handler that raised nothing ended the wait"
        assert waiter.wait() == 0


def test_a_handler_that_raises_nothing_runs_at_the_signal_and_the_wait_keeps_its_limit(
    daemon, client
):
    barrier = client.barrier("alone", 2)
    token = barrier.arrive()
    handled_at = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: handled_at.append(time.monotonic()))
    main = threading.main_thread().ident

    def send_until_handled() -> None:
        # Again every 50 ms: one that comes while the wait is between two sleeps is handled
        # only at the next.
        time.sleep(1.0)
        while not handled_at and time.monotonic() - started < 2.0:
            signal.pthread_kill(main, signal.SIGUSR1)
            time.sleep(0.05)

    try:
        sender = threading.Thread(target=send_until_handled)
        started = time.monotonic()
        sender.start()
        status = barrier.wait(token, timeout=3.0)
        took = time.monotonic() - started
        sender.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert status == gpumem.BarrierStatus.timeout
    assert handled_at, "the handler never ran"
    assert handled_at[0] - started < 2.5, "the handler ran only once the wait was over"
    assert 2.95 <= took < 3.7, f"{took:.2f} s: the wait started over at the signal (4 s)?"


@pytest.mark.parametrize("how", ["reservation", "operator"])
def test_ctrl_c_ends_the_wait_for_a_sleep_and_the_sleep_goes_on(daemon, client, how):
    name = f"sleeping-{how}"
    holder = reserve(client, name)  # mapped here: the sleep waits for it to let go
    with support.python_peer("sleep-through-signals", how, name) as sleeper:
        assert sleeper.line() == "waiting"
        for _ in range(3):
            signal_and_answer(sleeper, signal.SIGUSR1, "handled")
        signal_and_answer(sleeper, signal.SIGINT, "interrupted draining")
        holder.quiesce()
        assert sleeper.line() == "done asleep ok"
        assert sleeper.wait() == 0
    holder.wake()
    assert holds_pattern(holder, seed=1)


def test_a_handler_that_calls_the_reservation_whose_sleep_it_interrupts_is_refused(
    daemon, client
):
    holder = reserve(client, "called-back")
    with support.python_peer("sleep-through-signals", "calling-back", "called-back") as sleeper:
        assert sleeper.line() == "waiting"
        # The handler's call raises, which ends the wait as KeyboardInterrupt would.
        signal_and_answer(sleeper, signal.SIGUSR1, "error busy draining")
        refusal = sleeper.line()
        assert "signal handler" in refusal and "reservation" in refusal, refusal
        holder.quiesce()
        assert sleeper.line() == "done asleep ok"
        assert sleeper.wait() == 0
