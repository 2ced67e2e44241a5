"""New weights for running readers: each switches at its next step, without a restart and
without its tensors moving.

    gpumemd --socket /tmp/gpumemd.sock &
    python3 examples/python/hot_swap_weights.py --socket /tmp/gpumemd.sock [--readers 3]
        [--versions 3] [--device auto|cuda|host]

The writer (this process) reserves a range in gpumemd, writes version 1 of a small model's
weights into it and starts N reader processes. Each reader opens the range read-only, views its
layers once (tensors or arrays over the range, no copies) and runs a forward pass in a loop,
calling refresh() before each step. The writer then writes each next version beside the one
the readers use and commits it: every reader switches at its next step, and says which version
it computed with, that the weights are at the address they had from the start, and whether
their checksum is the one of that version. Old versions are freed by the daemon once no reader
maps them.

With PyTorch and a GPU (and a gpumemd with CUDA) the weights live on device 0; elsewhere, or
with --device host, they live in host memory and the readers use NumPy. Without --socket the
readers and the writer find gpumemd as every client does ($GPUMEM_SOCKET, then the default).
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time

import numpy as np

import gpumem

NAME = "hot_swap.weights"
LAYERS = 4
WIDTH = 256  # each layer is a WIDTH x WIDTH float32 matrix
ELEMENTS = LAYERS * WIDTH * WIDTH
NBYTES = ELEMENTS * 4
ROOM = 64 << 20  # the range reserved: later versions may be larger


def weights_of(version: int) -> np.ndarray:
    """Version @p version of the weights: multiples of 2^-10, so that sums of them are exact
    and a checksum tells one version from another (or from a torn mix of two)."""
    index = np.arange(ELEMENTS, dtype=np.int64)
    steps = (index * 7 + version * 131) % 251 - 125
    return (steps / 1024).astype(np.float32)


def expected_checksum(version: int) -> int:
    return int(((np.arange(ELEMENTS, dtype=np.int64) * 7 + version * 131) % 251 - 125).sum())


class Host:
    """The weights in host memory, used through NumPy."""

    device = gpumem.HOST

    @staticmethod
    def write(target, version: int) -> None:
        np.frombuffer(target, dtype=np.float32, count=ELEMENTS)[:] = weights_of(version)

    @staticmethod
    def layers(reservation: gpumem.Reservation) -> np.ndarray:
        flat = np.frombuffer(reservation, dtype=np.float32, count=ELEMENTS)
        return flat.reshape(LAYERS, WIDTH, WIDTH)

    @staticmethod
    def forward(layers: np.ndarray) -> float:
        x = np.ones((8, WIDTH), dtype=np.float32)
        for weight in layers:
            x = np.tanh(x @ weight)
        return float(x.sum())

    @staticmethod
    def checksum(layers: np.ndarray) -> int:
        return int((layers.astype(np.float64) * 1024).sum())


class Cuda:
    """The weights on CUDA device 0, used through PyTorch."""

    device = 0

    @staticmethod
    def write(target, version: int) -> None:
        import torch

        flat = torch.from_dlpack(target)[:NBYTES].view(torch.float32)
        flat.copy_(torch.from_numpy(weights_of(version)))
        torch.cuda.synchronize()  # the writes are done before the version is committed

    @staticmethod
    def layers(reservation: gpumem.Reservation):
        import torch

        flat = torch.from_dlpack(reservation)[:NBYTES].view(torch.float32)
        return flat.view(LAYERS, WIDTH, WIDTH)

    @staticmethod
    def forward(layers) -> float:
        import torch

        x = torch.ones(8, WIDTH, dtype=torch.float32, device=layers.device)
        for weight in layers:
            x = torch.tanh(x @ weight)
        return float(x.sum())  # waits for the kernels: refresh() may change the mapping next

    @staticmethod
    def checksum(layers) -> int:
        return int((layers.double() * 1024).sum().item())


PLACES = {"host": Host, "cuda": Cuda}


def choose_place(asked: str, client: gpumem.Client) -> str:
    if asked != "auto":
        return asked
    try:
        import torch
    except ImportError:
        return "host"
    return "cuda" if torch.cuda.is_available() and client.status()["cuda"] else "host"


def say(line: str) -> None:
    print(line, flush=True)


def reader(socket: str, number: int, place_name: str, last_version: int) -> int:
    """Runs forward passes until it has computed with @p last_version, saying a line at each
    version it sees. Exits 1 when a checksum is wrong or the weights moved, 2 when the writer
    is gone."""
    place = PLACES[place_name]
    writer = os.getppid()
    client = gpumem.connect(socket or None, label=f"hot_swap reader {number}")
    weights = client.open_reservation(NAME, read_only=True)
    weights.refresh()
    layers = place.layers(weights)  # made once: every version is mapped at this address
    address = weights.ptr
    seen = 0
    all_right = True
    for step in itertools.count(1):
        weights.refresh()  # asks the daemon only when a new version was committed
        version = weights.version
        output = place.forward(layers)
        if version != seen:
            checksum, expected = place.checksum(layers), expected_checksum(version)
            same_address = weights.ptr == address
            all_right = all_right and checksum == expected and same_address
            verdict = "ok" if checksum == expected else f"WRONG ({checksum}, not {expected})"
            where = "same address" if same_address else "MOVED to"
            say(
                f"reader {number}: {'started on' if seen == 0 else 'switched to'} version "
                f"{version} at step {step}, {where} {weights.ptr:#x}, checksum {verdict}, "
                f"output {output:.4f}"
            )
            seen = version
        if version >= last_version:
            return 0 if all_right else 1
        if os.getppid() != writer:
            return 2
        time.sleep(0.001)
    return 2


def start_readers(arguments: argparse.Namespace, place_name: str) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "reader",
                arguments.socket or "",
                str(number),
                place_name,
                str(arguments.versions),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for number in range(arguments.readers)
    ]


def relay_one_line_each(readers: list[subprocess.Popen]) -> bool:
    """Prints each reader's next line; false when a reader ended instead."""
    for process in readers:
        line = process.stdout.readline()
        if not line:
            say(f"a reader ended with status {process.wait()}")
            return False
        say(line.rstrip("\n"))
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", help="gpumemd's socket (default: as every client finds it)")
    parser.add_argument("--readers", type=int, default=3)
    parser.add_argument("--versions", type=int, default=3, help="versions written, from 1")
    parser.add_argument("--device", choices=["auto", "cuda", "host"], default="auto")
    arguments = parser.parse_args()

    client = gpumem.connect(arguments.socket, label="hot_swap writer")
    place_name = choose_place(arguments.device, client)
    place = PLACES[place_name]
    weights = client.reserve(ROOM, device=place.device, name=NAME, initial=NBYTES)
    place.write(weights, 1)  # version 1: its owner writes it in place
    say(f"writer: version 1 of {NBYTES >> 10} KiB of weights on {place_name} at {weights.ptr:#x}")

    readers = start_readers(arguments, place_name)
    try:
        all_right = relay_one_line_each(readers)
        for version in range(2, arguments.versions + 1):
            if not all_right:
                break
            time.sleep(0.1)  # the readers run a few steps on the version they have
            with weights.begin_version(NBYTES) as draft:
                place.write(draft, version)
                began = time.perf_counter()
                draft.commit()
            took = (time.perf_counter() - began) * 1e3
            say(f"writer: committed version {version} in {took:.2f} ms")
            all_right = relay_one_line_each(readers)
        all_right = all_right and all(process.wait(timeout=60) == 0 for process in readers)
    finally:
        for process in readers:
            if process.poll() is None:
                process.kill()
    if not all_right:
        say("a reader saw wrong weights, saw them move, or ended early")
        return 1
    say(
        f"every reader saw versions 1 to {arguments.versions} at one address with the right "
        "checksum: no restart, no pointer change"
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["reader"]:
        socket, number, place_name, last = sys.argv[2:6]
        sys.exit(reader(socket, int(number), place_name, int(last)))
    sys.exit(main())
