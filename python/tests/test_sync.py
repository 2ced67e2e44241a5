"""Locks, barriers and channels across processes, Python and C++ alike; waits let the GIL go."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

import gpumem
import support


def test_the_lock_context_manager_counts_exactly_across_four_processes(daemon, client):
    counter = client.allocate(8, name="counter")
    iterations = 1000
    counters = [support.python_peer("lock-count", "count", "counter", iterations) for _ in range(4)]
    for each in counters:
        assert each.line(timeout=120) == "done"
        assert each.wait() == 0
    assert memoryview(counter).cast("Q")[0] == 4 * iterations


def test_python_and_cpp_processes_share_one_lock(daemon, client):
    counter = client.allocate(8, name="counter")
    peers = [
        support.python_peer("lock-count", "count", "counter", 500),
        support.cpp_peer("lock-count", "count", "counter", 500),
    ]
    for each in peers:
        assert each.line(timeout=120) == "done"
    assert memoryview(counter).cast("Q")[0] == 1000


def test_acquire_reports_a_dead_holder_and_a_timeout(daemon, client):
    lock = client.lock("model.weights")
    with support.cpp_peer("lock-hold", "model.weights") as holder:
        assert holder.line() == "held"
        assert lock.acquire(timeout=0.05) == gpumem.Acquired.timeout
        assert not lock.acquire(timeout=0)
        assert not lock.try_lock()
        holder.kill()
        status = lock.acquire(timeout=5)
    assert status == gpumem.Acquired.owner_died and status
    assert lock.owner_died
    lock.mark_consistent()
    lock.unlock()
    with lock:
        assert not lock.owner_died
        assert client.sync_objects()[0]["state"] == "held"
    assert client.sync_objects()[0]["state"] == "free"


def blocked_wait_lets_other_threads_run(wait, lasting: float):
    """Runs wait(), which blocks for about `lasting` seconds, on another thread and returns what
    it returned. A wait that kept the GIL would keep this thread from waking from its short
    sleep until the wait was over; one that lets the GIL go lets it wake at once."""
    times = {}
    results = []

    def waiter_body():
        times["began"] = time.monotonic()
        results.append(wait())
        times["ended"] = time.monotonic()

    waiter = threading.Thread(target=waiter_body)
    waiter.start()
    time.sleep(0.2)
    woke = time.monotonic()
    waiter.join()
    assert times["ended"] - times["began"] > 0.75 * lasting, "the wait did not block"
    assert woke < times["ended"] - lasting / 2, (
        f"this thread woke {woke - times['began']:.2f} s into a wait of "
        f"{times['ended'] - times['began']:.2f} s: the wait held the GIL"
    )
    return results[0]


def test_a_held_lock_whose_last_reference_goes_stays_held_until_its_process_ends(daemon, client):
    # As a dropped threading.Lock stays held: closing it would tell the daemon its holder died
    # while the process may still be using what it protects.
    with support.python_peer("hold-dropped-lock", "dropped") as holder:
        assert holder.line() == "held"
        lock = client.lock("dropped")
        assert lock.acquire(timeout=0.3) == gpumem.Acquired.timeout
        holder.popen.send_signal(signal.SIGUSR1)
        assert holder.wait() == 0
        assert lock.acquire(timeout=5) == gpumem.Acquired.owner_died
        lock.mark_consistent()
        lock.unlock()


def test_a_thread_blocked_on_a_lock_lets_other_threads_run(daemon, client):
    lock = client.lock("busy")
    with support.cpp_peer("lock-hold", "busy") as holder:
        assert holder.line() == "held"
        status = blocked_wait_lets_other_threads_run(lambda: lock.acquire(timeout=2), lasting=2)
    assert status == gpumem.Acquired.timeout


def test_a_thread_blocked_on_a_barrier_lets_other_threads_run(daemon, client):
    barrier = client.barrier("stage", 2)
    token = barrier.arrive()
    status = blocked_wait_lets_other_threads_run(
        lambda: barrier.wait(token, timeout=2), lasting=2
    )
    assert status == gpumem.BarrierStatus.timeout


def test_a_barrier_of_python_and_cpp_parties_keeps_every_round_together(daemon, client):
    parties, rounds = 3, 200
    progress_buffer = client.allocate(4 * parties, name="progress")
    progress = np.frombuffer(progress_buffer, dtype=np.uint32)
    barrier = client.barrier("stage", parties)
    others = [
        support.cpp_peer("barrier-rounds", "stage", parties, rounds, "progress")
        for _ in range(parties - 1)
    ]
    for round_number in range(1, rounds + 1):
        progress[barrier.party] = round_number
        assert barrier.arrive_and_wait() == gpumem.BarrierStatus.ok
        assert progress.min() >= round_number
    for each in others:
        assert each.line() == "done"


def test_a_dead_party_breaks_the_barrier(daemon, client):
    barrier = client.barrier("stage", 2)
    with support.cpp_peer("barrier-join", "stage", 2) as other:
        assert other.line().startswith("ready")
        token = barrier.arrive()
        other.kill()
        assert barrier.wait(token, timeout=5) == gpumem.BarrierStatus.broken
    assert barrier.broken


def test_a_python_producer_feeds_a_cpp_consumer(daemon):
    items, slots, slot_bytes = 64, 4, 4096
    consumer = support.cpp_peer("channel-consume", "frames", items, 1, slots, slot_bytes)
    producer = support.python_peer("channel-produce", "frames", items, 1, slots, slot_bytes)
    assert producer.line() == "done"
    assert consumer.line() == f"ok {items}"


def test_a_python_consumer_sees_every_item_of_a_cpp_producer(daemon, client):
    items, slots, slot_bytes = 64, 4, 4096
    channel = client.channel(
        "frames", gpumem.ChannelRole.consumer, slots=slots, slot_bytes=slot_bytes
    )
    memory = np.frombuffer(channel.buffer, dtype=np.uint8)
    with support.cpp_peer("channel-produce", "frames", items, 1, slots, slot_bytes) as producer:
        for item in range(items):
            slot = channel.acquire()
            assert (slot.sequence, slot.status) == (item, gpumem.BarrierStatus.ok)
            data = memory[slot.offset : slot.offset + slot_bytes]
            assert support.first_mismatch(data, item) == slot_bytes
            assert slot.data == channel.buffer.ptr + slot.offset
            channel.release()
        assert producer.line() == "done"


def test_a_consumer_that_cuts_the_slots_otherwise_is_refused_and_the_channel_goes_on(client):
    producer = client.channel("cut", gpumem.ChannelRole.producer, slots=2, slot_bytes=64)
    with pytest.raises(gpumem.Error) as raised:
        client.channel("cut", gpumem.ChannelRole.consumer, slots=4, slot_bytes=32)
    assert raised.value.code == gpumem.errc.invalid_argument
    assert "channel 'cut' has 2 slots of 64 bytes, not 4 slots of 32 bytes" in str(raised.value)
    consumer = client.channel("cut", gpumem.ChannelRole.consumer, slots=2, slot_bytes=64)
    assert not producer.broken
    slot = producer.acquire_slot()
    np.frombuffer(producer.buffer, dtype=np.uint8)[slot.offset : slot.offset + 64] = 9
    producer.publish()
    item = consumer.acquire()
    assert item.status == gpumem.BarrierStatus.ok
    assert np.frombuffer(consumer.buffer, dtype=np.uint8)[item.offset + 63] == 9
    consumer.release()


def test_a_stream_form_needs_a_stream_on_a_cuda_machine_only(client):
    lock = client.lock("host-only")
    lock.lock()
    with pytest.raises(gpumem.Error) as raised:
        lock.lock(stream=0)
    assert raised.value.code in (gpumem.errc.wrong_domain, gpumem.errc.not_supported)
    lock.unlock()
