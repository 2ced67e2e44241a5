"""Buffers shared between processes: Python with Python, Python with C++ (gpumem_test_peer),
and what happens to a holder's memory when it is killed."""

from __future__ import annotations

import numpy as np

import support

SIZE = 1 << 20


def test_a_python_process_reads_what_another_python_process_wrote(daemon):
    with support.python_peer("hold-new", "frames", SIZE, 11) as writer:
        assert writer.line().startswith("ready")
        reader = support.python_peer("verify", "frames", SIZE, 11)
        assert reader.line() == "ok"
        assert reader.wait() == 0


def test_a_cpp_process_reads_what_python_wrote(daemon, client):
    buffer = client.allocate(SIZE, name="from-python")
    np.frombuffer(buffer, dtype=np.uint8)[:] = support.pattern(SIZE, 12)
    reader = support.cpp_peer("verify", "from-python", SIZE, 12)
    assert reader.line() == "ok"
    assert reader.wait() == 0


def test_python_reads_what_a_cpp_process_wrote(daemon, client):
    with support.cpp_peer("hold-new", "from-cpp", SIZE, 13) as writer:
        ready, allocation_id = writer.line().split()
        assert ready == "ready"
        buffer = client.open("from-cpp", read_only=True)
        assert buffer.id == int(allocation_id)
        assert support.first_mismatch(np.frombuffer(buffer, dtype=np.uint8), 13) == SIZE
        assert support.first_mismatch(np.from_dlpack(client.open("from-cpp")), 13) == SIZE


def test_memory_outlives_its_killed_owner_while_python_holds_it(daemon, client):
    with support.cpp_peer("hold-new", "orphan", SIZE, 16) as owner:
        assert owner.line().startswith("ready")
        array = np.from_dlpack(client.open("orphan"))
        owner.kill()
    assert daemon.bytes_in_use() == SIZE
    assert support.first_mismatch(array, 16) == SIZE
    del array
    assert daemon.wait_for_bytes_in_use(0)


def test_a_killed_python_holders_memory_returns(daemon):
    with support.python_peer("hold-new", "doomed", SIZE, 17) as holder:
        assert holder.line().startswith("ready")
        assert daemon.bytes_in_use() == SIZE
    assert daemon.wait_for_bytes_in_use(0)
