"""N workers that need the same model weights, side by side in one run: each loading its own
copy from the file, against opening one copy that gpumemd holds (examples/python/
shared_weights.py does the work). For N = 1, 2, 4, 8 it prints the time until the Nth worker is
ready (weights on the GPU and a forward pass done, from the moment all workers start together)
and the device memory the run uses (every process of the run, CUDA contexts included).

    python3 bench/python/shared_weights_bench.py [--gib 4] [--workers 1,2,4,8] [--daemon PATH]

Each run starts a gpumemd of its own (from the build folder unless --daemon says otherwise), so
that every run begins with empty pools. Needs PyTorch on a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import torch

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY / "examples" / "python"))

import gpumem  # noqa: E402
import shared_weights  # noqa: E402


@contextlib.contextmanager
def own_daemon(program: str):
    with tempfile.TemporaryDirectory(prefix="gpumem-bench-") as folder:
        socket = os.path.join(folder, "gpumemd.sock")
        daemon = subprocess.Popen([program, "--socket", socket, "--log-level", "warn"])
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    gpumem.connect(socket, label="bench").ping()
                    break
                except gpumem.Error:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            os.environ["GPUMEM_SOCKET"] = socket
            yield socket
        finally:
            daemon.terminate()
            daemon.wait()


def device_bytes_used() -> int:
    free, total = torch.cuda.mem_get_info(0)
    return total - free


def run(mode: str, path: pathlib.Path, count: int, daemon: str) -> tuple[float, int, float]:
    """(seconds until the last worker is ready, device bytes the run uses, the loader's seconds
    for the one shared copy)."""
    with own_daemon(daemon) as socket:
        client = gpumem.connect(socket, label="bench loader")
        torch.cuda.synchronize()
        baseline = device_bytes_used()
        stream = torch.cuda.Stream(device=0)
        load_seconds = 0.0
        weights = None
        if mode == "shared":
            began = time.monotonic()
            weights = shared_weights.publish(client, path, stream)
            load_seconds = time.monotonic() - began
        barrier_name = f"bench.{mode}.{count}"
        workers = shared_weights.start_workers(mode, path, count, barrier_name)
        start = client.barrier(barrier_name, count + 1)
        start.arrive_and_wait()
        started = time.monotonic()
        answers = [each.stdout.readline().split() for each in workers]
        if any(not answer or answer[0] != "ready" for answer in answers):
            raise RuntimeError(f"a {mode} worker failed: {answers}")
        used = device_bytes_used() - baseline
        for each in workers:
            each.communicate("")
        if weights is not None:
            weights.release()
        last_ready = max(float(answer[1]) for answer in answers) - started
        return last_ready, used, load_seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=4.0, help="size of the model file")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--file", type=pathlib.Path)
    parser.add_argument("--daemon", default=str(REPOSITORY / "build" / "daemon" / "gpumemd"))
    arguments = parser.parse_args()
    path = arguments.file or shared_weights.default_model_path(arguments.gib)
    if not path.exists():
        print(f"writing {path} ...", flush=True)
        shared_weights.write_model(path, arguments.gib)
    header, _, data_bytes = shared_weights.read_header(path)
    torch.zeros(1, device="cuda:0")
    print(f"model: {data_bytes / (1 << 30):.2f} GiB in {len(header)} float16 layers; "
          f"GPU: {torch.cuda.get_device_name(0)}")
    print("memory: device memory the run uses, every process's CUDA context included")
    print(f"{'workers':>7}  {'private: Nth ready':>18}  {'memory':>9}  "
          f"{'shared: Nth ready':>17}  {'memory':>9}  {'ready ratio':>11}  {'memory ratio':>12}  "
          f"{'one shared load':>15}")
    for count in (int(each) for each in arguments.workers.split(",")):
        private_ready, private_used, _ = run("private", path, count, arguments.daemon)
        shared_ready, shared_used, load_seconds = run("shared", path, count, arguments.daemon)
        print(f"{count:>7}  {private_ready:>16.3f} s  {private_used / (1 << 30):>5.2f} GiB  "
              f"{shared_ready * 1e3:>14.1f} ms  {shared_used / (1 << 30):>5.2f} GiB  "
              f"{shared_ready / private_ready:>11.4f}  {shared_used / private_used:>12.2f}  "
              f"{load_seconds:>13.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
