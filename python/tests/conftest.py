"""Every test gets a real gpumemd of the build tree on a socket in a temporary folder, as the
C++ black-box tests do (tests/support/daemon_process.cpp). ctest names the programs and the
package in the environment; run by hand after a build into build/, the defaults find them:
`python3 -m pytest python/tests`."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

import support

pytest_plugins = ["skip_reporting"]

try:
    import gpumem
except ImportError:  # not installed: the package staged in the default build folder
    sys.path.insert(0, str(support.REPOSITORY / "build" / "python"))
    import gpumem


class Daemon:
    def __init__(self, folder, extra_arguments: list[str]) -> None:
        self.socket_path = str(folder / "gpumemd.sock")
        program = support.built_program("GPUMEM_TEST_DAEMON", "daemon/gpumemd")
        log_level = os.environ.get("GPUMEM_TEST_LOG", "warn")
        self.process = support.Process(
            [program, "--socket", self.socket_path, "--log-level", log_level, *extra_arguments]
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                gpumem.connect(self.socket_path, label="probe").ping()
                return
            except gpumem.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def connect(self, label: str = "test") -> gpumem.Client:
        return gpumem.connect(self.socket_path, label=label)

    def bytes_in_use(self, pool: int = 0) -> int:
        return self.connect("watcher").stats()["pools"][pool]["bytes_in_use"]

    def wait_for_bytes_in_use(self, expected: int, within: float = 5, pool: int = 0) -> bool:
        watcher = self.connect("watcher")
        return support.wait_until(
            lambda: watcher.stats()["pools"][pool]["bytes_in_use"] == expected, within
        )

    def stop(self) -> int:
        return self.process.kill(signal.SIGTERM)


@pytest.fixture
def daemon_arguments() -> list[str]:
    """Extra gpumemd arguments; a test module overrides this fixture to change them."""
    return []


@pytest.fixture
def daemon(tmp_path, monkeypatch, daemon_arguments):
    """A gpumemd of its own; GPUMEM_SOCKET names it, for this process and its children."""
    started = Daemon(tmp_path, daemon_arguments)
    monkeypatch.setenv("GPUMEM_SOCKET", started.socket_path)
    # Each test's daemon is gone after it, for good: what a later garbage collection releases
    # must not wait for it to come back.
    monkeypatch.setenv("GPUMEM_RECONNECT_MS", "0")
    yield started
    assert started.stop() == 0, "gpumemd did not exit cleanly on SIGTERM"


@pytest.fixture
def client(daemon) -> gpumem.Client:
    return daemon.connect()
