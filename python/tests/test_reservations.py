"""Reservations on the host backend: one address in every holder while the contents change
version, sleep and wake; drafts; exports that hold the reservation; the hot-swap example."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

import gpumem
import support
from test_buffers import versioned_tensor

CHUNK = 2 << 20  # the host backend's chunk
SIZE = CHUNK
MAX_SIZE = 8 * CHUNK


def reserve(client: gpumem.Client, name: str = "weights", seed: int = 1) -> gpumem.Reservation:
    """A host reservation of SIZE bytes at version 1, holding the pattern of @p seed."""
    reservation = client.reserve(MAX_SIZE, device=gpumem.HOST, name=name, initial=SIZE)
    np.frombuffer(reservation, dtype=np.uint8)[:SIZE] = support.pattern(SIZE, seed)
    return reservation


def commit_version(reservation: gpumem.Reservation, seed: int, size: int = SIZE) -> None:
    with reservation.begin_version(size) as draft:
        np.frombuffer(draft, dtype=np.uint8)[:size] = support.pattern(size, seed)
        draft.commit()


def holds_pattern(reservation: gpumem.Reservation, seed: int, size: int = SIZE) -> bool:
    contents = np.frombuffer(reservation, dtype=np.uint8)[:size]
    return support.first_mismatch(contents, seed) == size


def test_a_reservation_maps_its_initial_bytes_writable_for_its_owner(client):
    owner = client.reserve(MAX_SIZE, device=gpumem.HOST, name="weights", initial=SIZE)
    assert (owner.size, owner.max_size, owner.chunk_size) == (SIZE, MAX_SIZE, CHUNK)
    assert (owner.device, owner.version) == (gpumem.HOST, 1)
    assert owner.state == gpumem.ReservationState.awake
    assert not owner.read_only
    view = memoryview(owner)
    assert (view.nbytes, view.readonly) == (SIZE, False)
    view[:5] = b"first"
    assert owner.__dlpack_device__() == (1, 0)
    assert not hasattr(owner, "__cuda_array_interface__")
    assert "version=1" in repr(owner) and "awake" in repr(owner)


def test_a_reader_sees_the_owners_bytes_read_only_and_its_growth_at_the_same_address(
    daemon, client
):
    owner = reserve(client)
    reader = daemon.connect("reader").open_reservation("weights", read_only=True)
    assert (reader.id, reader.version, reader.size) == (owner.id, 1, SIZE)
    assert reader.read_only
    assert memoryview(reader).readonly
    assert holds_pattern(reader, 1)
    address = reader.ptr
    owner.resize(3 * CHUNK)
    assert owner.size == 3 * CHUNK
    assert reader.refresh() == 3 * CHUNK
    assert reader.ptr == address


def test_holders_in_other_processes_see_every_version_in_order_at_one_address(daemon, client):
    owner = reserve(client, seed=1)
    readers = [support.python_peer("reservation-follow", "weights", SIZE, 4) for _ in range(2)]
    try:
        addresses = []
        for reader in readers:
            ready, version, address = reader.line().split()
            assert (ready, version) == ("ready", "1")
            addresses.append(address)
        for version in (2, 3, 4):
            commit_version(owner, seed=version)
            assert owner.version == version
            for reader, address in zip(readers, addresses):
                assert reader.line() == f"version {version} {address} ok"
        assert all(reader.wait() == 0 for reader in readers)
    finally:
        for reader in readers:
            reader.kill()


def test_wait_version_lets_other_threads_run_and_returns_at_the_commit(daemon, client):
    owner = reserve(client)
    reader = daemon.connect("reader").open_reservation("weights", read_only=True)
    seen = {}
    waiter = threading.Thread(target=lambda: seen.update(got=reader.wait_version(2, timeout=30)))
    waiter.start()
    commit_version(owner, seed=2)  # runs only if the waiting thread let the GIL go
    waiter.join(timeout=30)
    assert seen == {"got": True}
    assert reader.version == 2
    assert holds_pattern(reader, 2)


def test_wait_version_gives_false_when_the_time_runs_out(daemon, client):
    owner = reserve(client)
    began = time.monotonic()
    assert owner.wait_version(2, timeout=0.05) is False
    assert 0.04 <= time.monotonic() - began < 5
    assert owner.version == 1
    with pytest.raises(ValueError):
        owner.wait_version(2, timeout=-1)


def test_a_committed_version_is_read_only_to_its_owner_too(client):
    owner = reserve(client)
    commit_version(owner, seed=2)
    assert (owner.version, owner.read_only) == (2, True)
    assert memoryview(owner).readonly
    assert holds_pattern(owner, 2)
    assert versioned_tensor(owner.__dlpack__(max_version=(1, 0))).flags & 1 == 1
    # A DLPack 0.x consumer cannot be told: its first write would fault, so it is refused.
    with pytest.raises(BufferError, match="read-only"):
        owner.__dlpack__()
    with pytest.raises(gpumem.Error) as resized:
        owner.resize(2 * CHUNK)
    assert resized.value.code == gpumem.errc.wrong_state


def test_a_draft_left_uncommitted_by_its_with_block_is_abandoned(daemon, client):
    owner = reserve(client)
    reader = daemon.connect("reader").open_reservation("weights", read_only=True)
    with pytest.raises(RuntimeError):
        with owner.begin_version(SIZE) as draft:
            assert (draft.version, draft.size, draft.device) == (2, SIZE, gpumem.HOST)
            assert draft.ptr != owner.ptr
            np.frombuffer(draft, dtype=np.uint8)[:] = support.pattern(SIZE, 9)
            raise RuntimeError("the writer failed half way")
    assert draft.abandoned and not draft.committed
    with owner.begin_version(SIZE) as quiet:
        pass
    assert quiet.abandoned
    assert owner.status().version == 1
    reader.refresh()
    assert reader.version == 1 and holds_pattern(reader, 1)
    with pytest.raises(BufferError, match="abandoned"):
        draft.ptr
    commit_version(owner, seed=2)  # no draft is left open; abandoned ones take no number
    assert owner.version == 2 and holds_pattern(owner, 2)


def test_a_draft_is_committed_only_once_its_exports_are_gone(client):
    owner = reserve(client)
    draft = owner.begin_version(SIZE)
    view = memoryview(draft)
    view[:] = support.pattern(SIZE, 2).tobytes()
    with pytest.raises(BufferError, match="export"):
        draft.commit()
    assert owner.version == 1
    view.release()
    draft.commit()
    assert draft.committed and owner.version == 2
    assert holds_pattern(owner, 2)
    draft.abandon()  # does nothing once committed
    assert owner.version == 2


def test_only_the_owner_writes_versions(daemon, client):
    owner = reserve(client)
    reader = daemon.connect("reader").open_reservation("weights", read_only=True)
    with pytest.raises(gpumem.Error):
        reader.begin_version(SIZE)
    with pytest.raises(gpumem.Error) as resized:
        reader.resize(2 * CHUNK)
    assert resized.value.code == gpumem.errc.permission_denied
    assert owner.version == 1 and owner.size == SIZE


def test_sleep_and_wake_keep_the_bytes_at_the_same_address(daemon, client):
    owner = reserve(client)
    reader = daemon.connect("reader").open_reservation("weights", read_only=True)
    view = np.frombuffer(owner, dtype=np.uint8)  # made once, used again after the wake
    address = owner.ptr
    reader.quiesce()  # lets go, so that the sleep need not wait for it
    owner.sleep()
    assert (owner.size, owner.state) == (0, gpumem.ReservationState.asleep)
    status = owner.status()
    assert status.state == gpumem.ReservationState.asleep and status.host_bytes >= SIZE
    assert reader.refresh() == 0 and reader.state == gpumem.ReservationState.asleep
    owner.wake()
    assert (owner.size, owner.ptr, owner.state) == (SIZE, address, gpumem.ReservationState.awake)
    assert support.first_mismatch(view[:SIZE], 1) == SIZE
    assert reader.refresh() == SIZE
    assert holds_pattern(reader, 1)
    assert owner.status().host_bytes == 0


def test_a_discarding_sleep_wakes_zeroed(daemon, client):
    owner = reserve(client)
    owner.sleep(discard=True)
    assert owner.status().state == gpumem.ReservationState.asleep
    owner.wake(timeout=30)
    assert not np.frombuffer(owner, dtype=np.uint8).any()


def test_a_holder_that_does_not_let_go_is_named_and_keeps_its_mapping(daemon, client):
    owner = reserve(client)
    reader = daemon.connect("stubborn reader").open_reservation("weights", read_only=True)
    with pytest.raises(gpumem.Error) as refused:
        owner.sleep(deadline=0.2)
    assert refused.value.code == gpumem.errc.busy
    assert "stubborn" in str(refused.value) and "did not let go" in str(refused.value)
    status = owner.status()
    assert (status.state, status.error) == (gpumem.ReservationState.awake, gpumem.errc.busy)
    assert owner.refresh() == SIZE
    assert holds_pattern(reader, 1)


def test_an_operator_puts_a_reservation_to_sleep_by_name(daemon, client):
    owner = reserve(client)
    owner.quiesce()
    operator = daemon.connect("operator")
    operator.sleep_reservation("weights")
    asleep = operator.reservation_status("weights")
    assert (asleep.id, asleep.busy) == (owner.id, False)
    assert asleep.state == gpumem.ReservationState.asleep
    assert "asleep" in repr(asleep)
    operator.wake_reservation("weights", timeout=30)
    assert operator.reservation_status("weights").state == gpumem.ReservationState.awake
    assert owner.refresh() == SIZE and holds_pattern(owner, 1)
    with pytest.raises(gpumem.Error) as missing:
        operator.sleep_reservation("no.such.reservation")
    assert missing.value.code == gpumem.errc.not_found


def test_a_dlpack_export_keeps_the_reservation_after_its_release(daemon, client):
    owner = reserve(client, name="kept")
    array = np.from_dlpack(owner)
    assert (array.dtype, array.shape, array.ctypes.data) == (np.uint8, (SIZE,), owner.ptr)
    owner.release()
    assert owner.released and "released" in repr(owner)
    with pytest.raises(BufferError, match="released"):
        owner.ptr
    assert [each["name"] for each in client.reservations()] == ["kept"]
    assert support.first_mismatch(array, 1) == SIZE  # still mapped
    del array
    assert support.wait_until(lambda: client.reservations() == [], 5)


def test_a_with_block_releases_the_reservation_at_its_end(daemon, client):
    with client.reserve(MAX_SIZE, device=gpumem.HOST, name="scratch", initial=SIZE) as scratch:
        assert len(client.reservations()) == 1
    assert scratch.released
    assert support.wait_until(lambda: client.reservations() == [], 5)
    with pytest.raises(gpumem.Error) as missing:
        client.open_reservation("scratch")
    assert missing.value.code == gpumem.errc.not_found


def test_the_hot_swap_example_switches_every_reader_without_moving_the_weights(daemon):
    example = support.REPOSITORY / "examples/python/hot_swap_weights.py"
    run = support.Process(
        [
            sys.executable,
            str(example),
            "--socket",
            daemon.socket_path,
            "--device",
            "host",
            "--readers",
            "2",
            "--versions",
            "3",
        ]
    )
    lines = run.output(timeout=120)
    assert run.wait() == 0, lines
    switches = [line for line in lines if "switched to version" in line]
    assert len(switches) == 2 * 2, lines
    assert all("same address" in line and "checksum ok" in line for line in switches), lines
    assert lines[-1].startswith("every reader saw versions 1 to 3"), lines
