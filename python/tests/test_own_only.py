"""A client that keeps to its own objects (`Client.own_objects_only`). Names are first come,
first served: an object another user made under a name is refused to such a client, not
joined. The other user is `nobody`, a peer started through setpriv: that test needs root and a
build tree nobody can read, and skips otherwise."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from conftest import Daemon

import gpumem
import support

SIZE = 1 << 16
NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
PEER = str(support.PEER_SCRIPT)


def nobody_can_run_a_peer() -> bool:
    """Root, setpriv, and a package and peer script that nobody may read."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return False
    probe = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", f"import gpumem, numpy; open({str(PEER)!r})"],
        env=support.package_environment(),
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


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
    return support.Process([*AS_NOBODY, sys.executable, PEER, *map(str, arguments)])


def test_a_client_of_its_own_objects_joins_no_buffer_or_lock_another_user_made(shared_daemon):
    if not nobody_can_run_a_peer():
        pytest.skip("runs a peer as the user nobody: needs root, setpriv and a tree nobody reads")
    client = shared_daemon.connect()
    client.own_objects_only = True
    assert client.own_objects_only
    with peer_as_nobody("hold-new", "weights", SIZE, 21) as other:
        assert other.line().startswith("ready")
        with pytest.raises(gpumem.Error) as refused:
            client.open("weights")
        assert refused.value.code == gpumem.errc.permission_denied
        assert "its own uid" in str(refused.value) and "'weights'" in str(refused.value)
        # Set back, root, an administrator, opens it as before.
        client.own_objects_only = False
        opened = client.open("weights", read_only=True)
        assert support.first_mismatch(np.frombuffer(opened, dtype=np.uint8), 21) == SIZE
    client.own_objects_only = True
    with peer_as_nobody("hold-dropped-lock", "jobs") as other:
        assert other.line() == "held"
        with pytest.raises(gpumem.Error) as refused:
            client.lock("jobs")
        assert refused.value.code == gpumem.errc.permission_denied
        assert "lock 'jobs'" in str(refused.value)


def test_a_client_of_its_own_objects_makes_and_joins_them(client):
    buffer = client.allocate(SIZE, name="own.buffer")
    client.own_objects_only = True
    assert client.open("own.buffer").id == buffer.id
    reservation = client.reserve(2 << 20, device=gpumem.HOST, name="own.reservation")
    assert client.open_reservation("own.reservation").id == reservation.id
    lock = client.lock("own.lock")
    again = client.lock("own.lock")
    lock.lock()
    assert not again.try_lock()
    lock.unlock()
    assert client.barrier("own.barrier", 2).parties == 2
    producer = client.channel("own.channel", gpumem.ChannelRole.producer, slot_bytes=64)
    consumer = client.channel("own.channel", gpumem.ChannelRole.consumer, slot_bytes=64)
    assert producer.slot_bytes == consumer.slot_bytes == 64
