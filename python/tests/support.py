"""What the gpumem tests and their peer processes share: the byte pattern, the programs of the
build tree, and child processes that answer in lines."""

from __future__ import annotations

import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
PEER_SCRIPT = pathlib.Path(__file__).resolve().with_name("peer.py")


def built_program(variable: str, relative: str) -> str:
    """A program of the build: ctest names it in @p variable; else the default build folder."""
    path = os.environ.get(variable) or str(REPOSITORY / "build" / relative)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} is not built (set {variable} or build into build/)")
    return path


def pattern(size: int, seed: int) -> np.ndarray:
    """tests/support/pattern.hpp's bytes: position- and seed-dependent, so a check catches
    stale, shifted or foreign bytes."""
    index = np.arange(1, size + 1, dtype=np.uint64)
    # The seed goes in before the multiplication, which carries it into the byte kept.
    mixed = (index + np.uint64(seed << 32)) * np.uint64(0x9E3779B97F4A7C15)
    return (mixed >> np.uint64(56)).astype(np.uint8)


def first_mismatch(data: np.ndarray, seed: int) -> int:
    """The first index where @p data differs from the pattern, or its size when none does."""
    wrong = np.flatnonzero(data != pattern(data.size, seed))
    return int(wrong[0]) if wrong.size else data.size


def package_environment() -> dict[str, str]:
    """The environment of a child Python that imports the same gpumem as this process."""
    import gpumem

    environment = dict(os.environ)
    package_parent = str(pathlib.Path(gpumem.__file__).resolve().parents[1])
    paths = [package_parent, environment.get("PYTHONPATH", "")]
    environment["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    return environment


class Process:
    """A child process whose standard output the test reads line by line, with timeouts."""

    def __init__(self, argv: list[str], environment: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.popen = subprocess.Popen(
            argv, stdout=subprocess.PIPE, text=True, env=environment or package_environment()
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def line(self, timeout: float = 30) -> str:
        """The next line; fails the test when the process ends or stays silent."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.argv} said nothing for {timeout} s") from None
        if line is None:
            self._lines.put(None)
            raise AssertionError(f"{self.argv} ended with status {self.popen.wait()}")
        return line

    def output(self, timeout: float = 300) -> list[str]:
        """Every line up to the end of the process."""
        lines = []
        while True:
            try:
                lines.append(self.line(timeout))
            except AssertionError:
                if self.popen.poll() is None:
                    raise
                return lines

    def wait(self, timeout: float = 60) -> int:
        return self.popen.wait(timeout=timeout)

    def kill(self, signal_number: int = signal.SIGKILL) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal_number)
        return self.popen.wait(timeout=30)

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exception: object) -> None:
        self.kill()


def python_peer(*arguments: object) -> Process:
    """python/tests/peer.py, a gpumem client in Python driven by its arguments."""
    return Process([sys.executable, str(PEER_SCRIPT), *map(str, arguments)])


def cpp_peer(*arguments: object) -> Process:
    """tests/support/peer.cpp (gpumem_test_peer), the C++ client of the multi-process tests."""
    program = built_program("GPUMEM_TEST_PEER", "tests/gpumem_test_peer")
    return Process([program, *map(str, arguments)])


def wait_until(condition, within: float, poll: float = 0.002) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True
