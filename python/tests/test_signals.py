"""Ctrl-C reaches a thread that waits on the host for a lock, a barrier's round, a channel's
item or a reservation's version, as it reaches one in threading.Lock.acquire: the wait ends with KeyboardInterrupt, the
object works on for everyone, and a signal whose handler raises nothing lets the wait go on."""

from __future__ import annotations

import signal
import threading
import time

import pytest

import gpumem
import support
from test_reservations import commit_version, reserve


def interrupt(waiter: support.Process) -> None:
    """SIGINT until the waiter says it was interrupted: a signal that comes while its wait still
    spins, before it sleeps, ends nothing (the next one does)."""
    for _ in range(5):
        waiter.popen.send_signal(signal.SIGINT)
        try:
            assert waiter.line(timeout=1) == "interrupted"
            return
        except AssertionError:
            if waiter.popen.poll() is not None:
                raise
    raise AssertionError("five SIGINTs did not interrupt the wait")


def still_waiting(waiter: support.Process, seconds: float) -> bool:
    time.sleep(seconds)
    return waiter.popen.poll() is None and waiter._lines.empty()


@pytest.mark.parametrize("kind", ["lock", "barrier", "channel", "reservation"])
def test_ctrl_c_ends_a_host_wait_and_the_object_works_on(daemon, client, kind):
    name = f"interrupted-{kind}"
    if kind == "lock":
        other = client.lock(name)
        assert other.acquire() == gpumem.Acquired.acquired
    elif kind == "barrier":
        other = client.barrier(name, 2)
    elif kind == "channel":
        other = client.channel(name, gpumem.ChannelRole.producer, slots=2, slot_bytes=64)
    else:
        other = reserve(client, name)
    with support.python_peer("wait-through-signals", kind, name) as waiter:
        assert waiter.line() == "waiting"
        interrupt(waiter)
        assert waiter.line() == "waiting", "after KeyboardInterrupt the peer waits again"
        for _ in range(3):
            time.sleep(0.05)
            waiter.popen.send_signal(signal.SIGUSR1)
        assert still_waiting(waiter, 0.3), "a handler that raises nothing ended the wait"
        if kind == "lock":
            other.unlock()
            expected = "acquired"
        elif kind == "barrier":
            assert other.arrive_and_wait() == gpumem.BarrierStatus.ok
            expected = "ok"
        elif kind == "channel":
            slot = other.acquire_slot()
            assert slot.sequence == 0
            other.publish()
            expected = "item 0 ok"
        else:
            commit_version(other, seed=2)
            expected = "version 2"
        done = waiter.line()
        assert done.startswith(f"done {expected}, "), done
        assert int(done.split(", ")[1].split()[0]) >= 1, "the SIGUSR1 handler never ran"
        assert waiter.wait() == 0


def test_a_timed_wait_that_a_signal_interrupts_keeps_its_limit(daemon, client):
    """A handler that raises nothing has the wait go on for the time left, not start over."""
    barrier = client.barrier("alone", 2)
    token = barrier.arrive()
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        main = threading.main_thread().ident
        sender = threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGUSR1))
        started = time.monotonic()
        sender.start()
        status = barrier.wait(token, timeout=1.0)
        took = time.monotonic() - started
        sender.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert status == gpumem.BarrierStatus.timeout
    assert 0.95 <= took < 1.4, f"{took:.2f} s: started over at the signal (1.5 s)?"
