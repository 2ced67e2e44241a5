"""A gpumem client process in Python for the multi-process tests, driven by its arguments
(tests/support/peer.cpp is its C++ counterpart). It finds gpumemd through $GPUMEM_SOCKET.

  hold-new NAME SIZE SEED      allocate host memory, fill, print "ready ID", wait to be killed
  verify NAME SIZE SEED        open read-only, check, print "ok" or "mismatch at I"
  write-read-only NAME         open read-only, write a byte through the pointer, print "wrote"
  lock-count LOCK BUFFER N     N times: with the lock, read, yield, write the counter + 1; "done"
  channel-produce NAME ITEMS CONSUMERS SLOTS BYTES
                               publish ITEMS patterned items, print "done"
  wait-through-signals KIND NAME
                               on the host, KIND lock: acquire NAME; barrier: wait for the
                               first round of NAME (2 parties); channel: take the first item of
                               NAME (a consumer of 2 slots of 64 bytes); reservation: wait for
                               the version after the current one of NAME. Prints "waiting" at
                               each start, "interrupted" for each KeyboardInterrupt, after which
                               it waits again, "handled" for each SIGUSR1 (whose handler raises
                               nothing; SIGUSR2's does nothing), and at the end "done RESULT"
  hold-dropped-lock NAME       acquire lock NAME through a Lock dropped at once, collect garbage,
                               print "held"; on SIGUSR1, exit normally, without unlocking
  sleep-through-signals HOW NAME
                               put reservation NAME to sleep (60 s for holders to let go), HOW
                               reservation: through Reservation.sleep of a holder opened here;
                               operator: through Client.sleep_reservation; calling-back: as
                               reservation, with a SIGUSR1 handler that calls that holder.
                               Prints "waiting", "handled" for each SIGUSR1 (but calling-back),
                               then, once the wait ends, "interrupted STATE" for
                               KeyboardInterrupt or "error CODE STATE" and the error's text for
                               gpumem.Error (STATE: the daemon's state of it then); once the
                               sleep has ended, "done STATE ERROR"
  reservation-follow NAME SIZE LAST
                               open a host reservation read-only, view it once, print "ready
                               VERSION PTR"; then for each version up to LAST, wait for it
                               and print "version V PTR ok" when the view (made once) holds the
                               pattern of seed V, else "version V PTR mismatch at I"
GPU (PyTorch on device 0):
  torch-follow-reservation NAME SIZE LAST
                               reservation-follow through one tensor made by torch.from_dlpack
  torch-produce NAME SIZE SEED allocate, fill on a stream, synchronize, print "ready ID", wait
  torch-hold SIZE              allocate, print "ready ID", wait to be killed
  jax-verify NAME SIZE SEED    open, read through jax.dlpack, print "ok" or "mismatch at I"
  stream-lock-count LOCK BUFFER N
                               N times on a torch stream: lock(stream), counter += 1 by a
                               kernel, unlock(stream); synchronize; print "done"
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import time

import numpy as np

import gpumem
import support


def say(line: str) -> None:
    print(line, flush=True)


def wait_to_be_killed() -> None:
    while True:
        signal.pause()


def hold_new(client: gpumem.Client, name: str, size: str, seed: str) -> None:
    buffer = client.allocate(int(size), name=name)
    np.frombuffer(buffer, dtype=np.uint8)[:] = support.pattern(buffer.size, int(seed))
    say(f"ready {buffer.id}")
    wait_to_be_killed()


def verify(client: gpumem.Client, name: str, size: str, seed: str) -> int:
    buffer = client.open(name, read_only=True)
    if buffer.size != int(size):
        say(f"size {buffer.size}")
        return 1
    bad = support.first_mismatch(np.frombuffer(buffer, dtype=np.uint8), int(seed))
    say("ok" if bad == buffer.size else f"mismatch at {bad}")
    return 0 if bad == buffer.size else 1


def write_read_only(client: gpumem.Client, name: str) -> int:
    buffer = client.open(name, read_only=True)
    ctypes.memset(buffer.ptr, 0x5A, 1)  # the mapping has no write permission: SIGSEGV
    say("wrote")
    return 1


def lock_count(client: gpumem.Client, lock_name: str, buffer_name: str, iterations: str) -> int:
    lock = client.lock(lock_name)
    counter = memoryview(client.open(buffer_name)).cast("Q")
    for _ in range(int(iterations)):
        with lock:
            # A read, a yield, a write: any overlap of two holders loses increments.
            seen = counter[0]
            time.sleep(0)
            counter[0] = seen + 1
    say("done")
    return 0


def channel_produce(client: gpumem.Client, name: str, *numbers: str) -> int:
    items, consumers, slots, slot_bytes = map(int, numbers)
    channel = client.channel(
        name,
        gpumem.ChannelRole.producer,
        slots=slots,
        slot_bytes=slot_bytes,
        consumers=consumers,
    )
    memory = np.frombuffer(channel.buffer, dtype=np.uint8)
    for item in range(items):
        slot = channel.acquire_slot()
        if slot.status != gpumem.BarrierStatus.ok or slot.sequence != item:
            say(f"broken {item}")
            return 1
        memory[slot.offset : slot.offset + slot_bytes] = support.pattern(slot_bytes, item)
        channel.publish()
    say("done")
    return 0


def follow_reservation(client: gpumem.Client, name: str, size: str, last: str, view) -> int:
    """Sees each version in turn through one view of the range, made before the first: the
    address does not move, so the view shows every later version."""
    reservation = client.open_reservation(name, read_only=True)
    reservation.refresh()
    contents = view(reservation)
    address = reservation.ptr
    say(f"ready {reservation.version} {address:#x}")
    for version in range(reservation.version + 1, int(last) + 1):
        if not reservation.wait_version(version, timeout=60):
            say(f"timeout waiting for version {version}")
            return 1
        if reservation.ptr != address or reservation.size < int(size):
            say(f"moved to {reservation.ptr:#x} with {reservation.size} bytes")
            return 1
        bad = support.first_mismatch(contents()[: int(size)], reservation.version)
        verdict = "ok" if bad == int(size) else f"mismatch at {bad}"
        say(f"version {reservation.version} {address:#x} {verdict}")
    return 0


def reservation_follow(client: gpumem.Client, name: str, size: str, last: str) -> int:
    def host_view(reservation):
        array = np.frombuffer(reservation, dtype=np.uint8)
        return lambda: array

    return follow_reservation(client, name, size, last, host_view)


def torch_follow_reservation(client: gpumem.Client, name: str, size: str, last: str) -> int:
    import torch

    def device_view(reservation):
        tensor = torch.from_dlpack(reservation)
        return lambda: tensor.cpu().numpy()

    return follow_reservation(client, name, size, last, device_view)


def torch_produce(client: gpumem.Client, name: str, size: str, seed: str) -> None:
    import torch

    stream = torch.cuda.Stream(device=0)
    buffer = client.allocate(int(size), device=0, name=name, stream=stream)
    with torch.cuda.stream(stream):
        torch.from_dlpack(buffer).copy_(torch.from_numpy(support.pattern(int(size), int(seed))))
    stream.synchronize()  # the consumers open it only after "ready"
    say(f"ready {buffer.id}")
    wait_to_be_killed()


def torch_hold(client: gpumem.Client, size: str) -> None:
    import torch

    stream = torch.cuda.Stream(device=0)
    buffer = client.allocate(int(size), device=0, stream=stream)
    with torch.cuda.stream(stream):
        torch.from_dlpack(buffer).fill_(1)
    stream.synchronize()
    say(f"ready {buffer.id}")
    wait_to_be_killed()


def jax_verify(client: gpumem.Client, name: str, size: str, seed: str) -> int:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    buffer = client.open(name)
    array = jax.dlpack.from_dlpack(buffer)
    bad = support.first_mismatch(np.asarray(array), int(seed))
    say("ok" if bad == int(size) else f"mismatch at {bad}")
    return 0 if bad == int(size) else 1


def stream_lock_count(
    client: gpumem.Client, lock_name: str, buffer_name: str, iterations: str
) -> int:
    import torch

    stream = torch.cuda.Stream(device=0)
    lock = client.lock(lock_name)
    buffer = client.open(buffer_name, stream=stream)
    with torch.cuda.stream(stream):
        counter = torch.from_dlpack(buffer).view(torch.int64)[:1]
        for _ in range(int(iterations)):
            lock.lock(stream=stream)
            # Two kernels, a read then a write: overlapping holders lose increments.
            seen = counter.clone()
            counter.copy_(seen + 1)
            lock.unlock(stream=stream)
    stream.synchronize()
    say("done")
    return 0


def wait_through_signals(client: gpumem.Client, kind: str, name: str) -> None:
    if kind == "lock":
        lock = client.lock(name)
        wait = lock.acquire
    elif kind == "barrier":
        barrier = client.barrier(name, 2)
        token = barrier.arrive()
        wait = lambda: barrier.wait(token)  # noqa: E731
    elif kind == "channel":
        channel = client.channel(name, gpumem.ChannelRole.consumer, slots=2, slot_bytes=64)
        wait = channel.acquire
    else:
        reservation = client.open_reservation(name, read_only=True)
        wait = lambda: reservation.wait_version(reservation.version + 1)  # noqa: E731
    signal.signal(signal.SIGUSR1, lambda *_: say("handled"))
    signal.signal(signal.SIGUSR2, lambda *_: None)
    while True:
        try:
            say("waiting")
            result = wait()
            break
        except KeyboardInterrupt:
            say("interrupted")
    if kind == "lock":
        lock.unlock()
        result = result.name
    elif kind == "channel":
        result = f"item {result.sequence} {result.status.name}"
        channel.release()
    elif kind == "reservation":
        result = f"version {reservation.version}" if result else "no new version"
    else:
        result = result.name
    say(f"done {result}")


def hold_dropped_lock(client: gpumem.Client, name: str) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    assert client.lock(name).acquire() == gpumem.Acquired.acquired
    gc.collect()
    say("held")
    signal.sigwait([signal.SIGUSR1])


def sleep_through_signals(client: gpumem.Client, how: str, name: str) -> None:
    if how == "operator":
        sleep = lambda: client.sleep_reservation(name, deadline=60)  # noqa: E731
        status = lambda: client.reservation_status(name)  # noqa: E731
    else:
        reservation = client.open_reservation(name)
        sleep = lambda: reservation.sleep(deadline=60)  # noqa: E731
        status = reservation.status
    if how == "calling-back":
        signal.signal(signal.SIGUSR1, lambda *_: reservation.status())
    else:
        signal.signal(signal.SIGUSR1, lambda *_: say("handled"))
    signal.signal(signal.SIGUSR2, lambda *_: None)
    say("waiting")
    try:
        sleep()
        say("slept")
    except KeyboardInterrupt:
        say(f"interrupted {status().state.name}")
    except gpumem.Error as error:
        say(f"error {error.code.name} {status().state.name}")
        say(str(error))
    while status().busy:
        time.sleep(0.01)
    ended = status()
    say(f"done {ended.state.name} {ended.error.name}")


COMMANDS = {
    "hold-new": hold_new,
    "verify": verify,
    "write-read-only": write_read_only,
    "lock-count": lock_count,
    "channel-produce": channel_produce,
    "reservation-follow": reservation_follow,
    "torch-produce": torch_produce,
    "torch-follow-reservation": torch_follow_reservation,
    "torch-hold": torch_hold,
    "jax-verify": jax_verify,
    "stream-lock-count": stream_lock_count,
    "wait-through-signals": wait_through_signals,
    "sleep-through-signals": sleep_through_signals,
    "hold-dropped-lock": hold_dropped_lock,
}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        return 2
    client = gpumem.connect(label=f"python-peer-{argv[1]}")
    try:
        return COMMANDS[argv[1]](client, *argv[2:]) or 0
    except gpumem.Error as error:
        say(f"error {error.code.name} {error}")
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))
