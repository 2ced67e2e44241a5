"""Two processes share one PyTorch tensor through gpumemd, without a copy.

    python3 examples/python/share_tensor.py

The producer (this process) fills a named CUDA buffer through PyTorch on its own stream, then
starts the consumer (this script with the argument "consume"), which opens the buffer by name
and reads it through torch.from_dlpack: the same device memory, mapped into a second process.
Needs a running gpumemd ($GPUMEM_SOCKET names its socket) and PyTorch; without a GPU the buffer
is shared host memory and the tensors live on the CPU.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

import torch

import gpumem

NAME = "example.matrix"
ROWS, COLUMNS = 2048, 1024


def expected_matrix(device: torch.device) -> torch.Tensor:
    return torch.arange(ROWS * COLUMNS, dtype=torch.float32, device=device).view(ROWS, COLUMNS)


def place() -> tuple[int, torch.cuda.Stream | None]:
    """Device 0 and a stream of its own where there is a GPU; host memory elsewhere."""
    if torch.cuda.is_available():
        return 0, torch.cuda.Stream(device=0)
    return gpumem.HOST, None


def on(stream: torch.cuda.Stream | None):
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def as_matrix(buffer: gpumem.Buffer) -> torch.Tensor:
    # torch.from_dlpack gives the buffer's bytes as a 1-D uint8 tensor, zero copy; the views
    # only reinterpret them.
    return torch.from_dlpack(buffer).view(torch.float32).view(ROWS, COLUMNS)


def produce() -> int:
    client = gpumem.connect(label="share_tensor producer")
    device, stream = place()
    buffer = client.allocate(ROWS * COLUMNS * 4, device=device, name=NAME, stream=stream)
    with on(stream):
        matrix = as_matrix(buffer)
        matrix.copy_(expected_matrix(matrix.device))
    if stream is not None:
        stream.synchronize()  # another process reads it next: the writes must be done
    print(f"producer: wrote a {ROWS}x{COLUMNS} float32 matrix on {matrix.device} "
          f"into {NAME!r} (allocation {buffer.id})")
    consumer = subprocess.run([sys.executable, __file__, "consume"], check=False)
    buffer.release()
    print("producer: released it; the consumer " +
          ("agreed" if consumer.returncode == 0 else f"failed ({consumer.returncode})"))
    return consumer.returncode


def consume() -> int:
    client = gpumem.connect(label="share_tensor consumer")
    _, stream = place()
    buffer = client.open(NAME, stream=stream)
    with on(stream):
        matrix = as_matrix(buffer)
        same = torch.equal(matrix, expected_matrix(matrix.device))
    record = next(each for each in client.allocations() if each["name"] == NAME)
    print(f"consumer: opened {NAME!r} by name: a {tuple(matrix.shape)} {matrix.dtype} tensor on "
          f"{matrix.device}, {record['holders']} holders of one allocation, "
          + ("every element as written" if same else "NOT as written"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(consume() if sys.argv[1:] == ["consume"] else produce())
