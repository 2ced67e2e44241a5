"""A model's weights loaded once into gpumemd and shared read-only by N worker processes.

    python3 examples/python/shared_weights.py [--workers 4] [--gib 2] [--file PATH]

Writes a safetensors file of float16 layers (once; later runs reuse it), loads its tensors into
one named CUDA buffer, and starts N workers. Each opens the buffer read-only, views every layer
as a tensor of the buffer (no copy) and runs a forward pass. Without gpumem, each worker would
read the file into memory of its own: bench/python/shared_weights_bench.py compares the two.
Needs a running gpumemd ($GPUMEM_SOCKET names its socket) and PyTorch on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import gpumem

WIDTH = 4096  # each layer is a WIDTH x WIDTH float16 matrix: 32 MiB
BUFFER_NAME = "model.weights"
CHUNK = 64 << 20  # bytes read from the file and copied to the GPU at a time


def default_model_path(gib: float) -> pathlib.Path:
    return pathlib.Path(tempfile.gettempdir()) / f"gpumem-example-{gib:g}GiB.safetensors"


def write_model(path: pathlib.Path, gib: float) -> None:
    """A safetensors file (a little-endian u64 header size, a JSON header, then the bytes) of
    layers of random float16, scaled so that activations stay near 1 through every layer."""
    layer_bytes = WIDTH * WIDTH * 2
    layers = max(1, int(gib * (1 << 30)) // layer_bytes)
    header = {
        f"layers.{index}.weight": {
            "dtype": "F16",
            "shape": [WIDTH, WIDTH],
            "data_offsets": [index * layer_bytes, (index + 1) * layer_bytes],
        }
        for index in range(layers)
    }
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    generator = np.random.default_rng(0)
    partial = path.with_suffix(".partial")
    with open(partial, "wb") as file:
        file.write(struct.pack("<Q", len(text)) + text)
        for _ in range(layers):
            layer = generator.standard_normal((WIDTH, WIDTH), dtype=np.float32) / np.sqrt(WIDTH)
            file.write(layer.astype(np.float16).tobytes())
    os.replace(partial, path)


def read_header(path: pathlib.Path) -> tuple[dict, int, int]:
    """(the tensors' descriptions, where their bytes start in the file, how many there are)."""
    with open(path, "rb") as file:
        (size,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(size))
    header.pop("__metadata__", None)
    data_bytes = max(tensor["data_offsets"][1] for tensor in header.values())
    return header, 8 + size, data_bytes


def read_into(target: torch.Tensor, path: pathlib.Path, start: int, stream) -> None:
    """Copies the file's bytes from @p start into @p target (uint8, on the GPU) through a
    pinned staging buffer: the way a loader reads a checkpoint."""
    staging = torch.empty(min(CHUNK, target.numel()), dtype=torch.uint8, pin_memory=True)
    with open(path, "rb", buffering=0) as file, torch.cuda.stream(stream):
        file.seek(start)
        done = 0
        while done < target.numel():
            count = file.readinto(memoryview(staging.numpy())[: target.numel() - done])
            if not count:
                raise EOFError(f"{path} ends {target.numel() - done} bytes early")
            target[done : done + count].copy_(staging[:count], non_blocking=True)
            stream.synchronize()  # the staging buffer is reused next
            done += count


def layer_views(flat: torch.Tensor, header: dict) -> list[torch.Tensor]:
    """Every layer as a tensor over @p flat's bytes: views, no copies."""
    layers = []
    for name in sorted(header, key=lambda name: int(name.split(".")[1])):
        begin, end = header[name]["data_offsets"]
        layers.append(flat[begin:end].view(torch.float16).view(header[name]["shape"]))
    return layers


def forward(layers: list[torch.Tensor], stream) -> float:
    with torch.cuda.stream(stream):
        x = torch.ones(8, WIDTH, dtype=torch.float16, device="cuda:0")
        for weight in layers:
            x = torch.tanh(x @ weight)
        return float(x.float().sum())


def publish(client: gpumem.Client, path: pathlib.Path, stream) -> gpumem.Buffer:
    """Loads the file's tensors once, into one named CUDA buffer that workers open."""
    _, start, data_bytes = read_header(path)
    buffer = client.allocate(data_bytes, device=0, name=BUFFER_NAME, stream=stream)
    with torch.cuda.stream(stream):
        read_into(torch.from_dlpack(buffer), path, start, stream)
    return buffer


def worker(mode: str, path: str, barrier_name: str, parties: str) -> int:
    """One worker: starts CUDA, meets the others at a barrier, then loads (shared: opens the
    buffer; private: reads the file into memory of its own) and runs a forward pass. Prints
    "ready T SECONDS CHECKSUM" (T on the system's monotonic clock) and waits for its stdin to
    close, so that memory is measured while every worker holds its weights."""
    stream = torch.cuda.Stream(device=0)
    # The CUDA context and the math library's first-use set-up (~0.1 s, the same in both modes)
    # happen before the clock starts: the clock measures getting the weights and using them.
    forward([torch.zeros(WIDTH, WIDTH, dtype=torch.float16, device="cuda:0")], stream)
    client = gpumem.connect(label=f"shared_weights {mode} worker")
    header, start, data_bytes = read_header(pathlib.Path(path))
    barrier = client.barrier(barrier_name, int(parties))
    barrier.arrive_and_wait()
    began = time.monotonic()
    if mode == "shared":
        buffer = client.open(BUFFER_NAME, read_only=True, stream=stream)
        with torch.cuda.stream(stream):
            flat = torch.from_dlpack(buffer)
    else:
        flat = torch.empty(data_bytes, dtype=torch.uint8, device="cuda:0")
        read_into(flat, pathlib.Path(path), start, stream)
    checksum = forward(layer_views(flat, header), stream)
    ready = time.monotonic()
    print(f"ready {ready:.6f} {ready - began:.6f} {checksum:.6f}", flush=True)
    sys.stdin.read()
    return 0


def start_workers(mode: str, path: pathlib.Path, count: int, barrier_name: str) -> list:
    command = [sys.executable, __file__, "worker", mode, str(path), barrier_name, str(count + 1)]
    return [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--gib", type=float, default=2.0, help="size of the model file")
    parser.add_argument("--file", type=pathlib.Path, help="default: one in the temp folder")
    arguments = parser.parse_args()
    path = arguments.file or default_model_path(arguments.gib)
    if not path.exists():
        print(f"writing {path} ...", flush=True)
        write_model(path, arguments.gib)
    client = gpumem.connect(label="shared_weights loader")
    stream = torch.cuda.Stream(device=0)
    began = time.monotonic()
    weights = publish(client, path, stream)
    print(f"loader: {weights.size / (1 << 30):.2f} GiB of weights into {BUFFER_NAME!r} "
          f"in {time.monotonic() - began:.2f} s", flush=True)
    workers = start_workers("shared", path, arguments.workers, "shared_weights.start")
    start = client.barrier("shared_weights.start", arguments.workers + 1)
    start.arrive_and_wait()
    answers = [each.stdout.readline().split() for each in workers]
    for number, answer in enumerate(answers):
        print(f"worker {number}: ready in {float(answer[2]) * 1e3:.1f} ms, checksum {answer[3]}")
    for each in workers:
        each.communicate("")
    same = len({answer[3] for answer in answers}) == 1
    print("every worker computed the same output" if same else "the workers disagree")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(worker(*sys.argv[2:]) if sys.argv[1:2] == ["worker"] else main())
