"""Opening only the caller's own objects (`own_only`). Names are first come, first served: an
object another user made under a name is refused to an own_only open, not joined. The other
user is `nobody`, a peer started through setpriv: those tests need root, and skip otherwise."""

from __future__ import annotations

import os
import pathlib
import shutil
import sys
import tempfile

import numpy as np
import pytest
from conftest import Daemon

import gpumem
import support

SIZE = 1 << 16
NOBODY = 65534

as_another_user = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="runs a peer as the user nobody: needs root and setpriv",
)


@pytest.fixture
def shared_daemon(monkeypatch):
    """A gpumemd that nobody may reach: a socket of mode 0666 in a folder others may enter."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="gpumem-own-only-"))
    folder.chmod(0o755)
    config = folder / "gpumemd.yaml"
    config.write_text(
        f"access:\n  connect_users: [{NOBODY}]\n"
        "pools:\n  - {name: host, device: host, size: 16MiB}\n"
    )
    started = Daemon(folder, ["--config", str(config), "--socket-mode", "0666"])
    monkeypatch.setenv("GPUMEM_SOCKET", started.socket_path)
    monkeypatch.setenv("GPUMEM_RECONNECT_MS", "0")
    yield started
    assert started.stop() == 0, "gpumemd did not exit cleanly on SIGTERM"
    shutil.rmtree(folder)


def peer_as_nobody(*arguments: object) -> support.Process:
    return support.Process(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            sys.executable,
            str(support.PEER_SCRIPT),
            *map(str, arguments),
        ]
    )


@as_another_user
def test_an_own_only_open_refuses_a_buffer_and_a_lock_another_user_made(shared_daemon):
    client = shared_daemon.connect()
    with peer_as_nobody("hold-new", "weights", SIZE, 21) as other:
        assert other.line().startswith("ready")
        with pytest.raises(gpumem.Error) as refused:
            client.open("weights", own_only=True)
        assert refused.value.code == gpumem.errc.permission_denied
        assert "own_only" in str(refused.value) and "'weights'" in str(refused.value)
        # Without it, root, an administrator, opens it as before.
        opened = client.open("weights", read_only=True)
        assert support.first_mismatch(np.frombuffer(opened, dtype=np.uint8), 21) == SIZE
    with peer_as_nobody("hold-dropped-lock", "jobs") as other:
        assert other.line() == "held"
        with pytest.raises(gpumem.Error) as refused:
            client.lock("jobs", own_only=True)
        assert refused.value.code == gpumem.errc.permission_denied
        assert "lock 'jobs'" in str(refused.value)


def test_own_only_makes_and_joins_the_callers_own_objects(client):
    buffer = client.allocate(SIZE, name="own.buffer")
    assert client.open("own.buffer", own_only=True).id == buffer.id
    reservation = client.reserve(2 << 20, device=gpumem.HOST, name="own.reservation")
    assert client.open_reservation("own.reservation", own_only=True).id == reservation.id
    lock = client.lock("own.lock", own_only=True)
    again = client.lock("own.lock", own_only=True)
    lock.lock()
    assert not again.try_lock()
    lock.unlock()
    first = client.barrier("own.barrier", 2, own_only=True)
    second = client.barrier("own.barrier", 2, own_only=True)
    assert first.parties == second.parties == 2
    producer = client.channel(
        "own.channel", gpumem.ChannelRole.producer, slot_bytes=64, own_only=True
    )
    consumer = client.channel(
        "own.channel", gpumem.ChannelRole.consumer, slot_bytes=64, own_only=True
    )
    assert producer.slot_bytes == consumer.slot_bytes == 64
