"""gpumem: memory that processes share through gpumemd, zero-copy into NumPy, PyTorch, CuPy and JAX.

    import gpumem, torch
    client = gpumem.connect()
    weights = client.allocate(1 << 30, device=0, name="weights")
    t = torch.from_dlpack(weights)        # 1-D uint8 tensor on cuda:0, the same memory
    # in another process:
    same = gpumem.connect().open("weights", read_only=True)

Buffers export DLPack (1.0 and 0.x), the buffer protocol (host memory) and
__cuda_array_interface__ (CUDA memory); every failure raises gpumem.Error, whose .code is a
gpumem.errc member. Calls that wait let the GIL go.

Reservations keep one address in every holder while their contents change version, sleep to
host memory and wake:

    weights = client.reserve(8 << 30, device=0, name="llama", initial=nbytes)
    torch.from_dlpack(weights)[:nbytes].copy_(first)  # version 1: its owner writes in place
    with weights.begin_version(nbytes) as draft:     # the next version, written beside it
        torch.from_dlpack(draft)[:nbytes].copy_(second)
        torch.cuda.synchronize()
        draft.commit()  # refused while a tensor of the draft lives: commit unmaps it
    # a reader, in its own process:
    w = gpumem.connect().open_reservation("llama", read_only=True)
    flat = torch.from_dlpack(w)  # made once: w.ptr never moves
    while True:
        w.refresh()  # maps the newest version at the same address
        forward(flat)

A tensor made from a reservation holds it, and stays valid across versions and wake; it must
not be used while the reservation sleeps or is quiesced, nor beyond size after a refresh that
shrank it. A version after the first is mapped read-only: the buffer protocol and DLPack 1.0
say so, a DLPack 0.x consumer of read-only host memory is refused.
"""

from __future__ import annotations

import os
import sys

from . import _gpumem
from ._gpumem import (
    HOST,
    Acquired,
    Barrier,
    BarrierStatus,
    BarrierToken,
    Buffer,
    Channel,
    ChannelRole,
    ChannelSlot,
    Client,
    Error,
    Lock,
    Reservation,
    ReservationDraft,
    ReservationState,
    ReservationStatus,
    errc,
)

__version__: str = _gpumem.__version__

__all__ = [
    "HOST",
    "Acquired",
    "Barrier",
    "BarrierStatus",
    "BarrierToken",
    "Buffer",
    "Channel",
    "ChannelRole",
    "ChannelSlot",
    "Client",
    "Error",
    "Lock",
    "Reservation",
    "ReservationDraft",
    "ReservationState",
    "ReservationStatus",
    "connect",
    "errc",
]


def _program_name() -> str:
    # What `gpumemctl clients` shows: the script, not "python3".
    script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
    return os.path.basename(script) or os.path.basename(sys.executable)


def connect(
    socket_path: str | os.PathLike[str] | None = None,
    label: str | None = None,
    reconnect_for: float | None = None,
) -> Client:
    """Connects to gpumemd.

    socket_path: None for $GPUMEM_SOCKET, then the default locations (those of gpumemd).
    label: what `gpumemctl clients` shows; None for the script's name.
    reconnect_for: seconds a call whose connection broke (gpumemd restarted) keeps trying to
    connect again, resume the session and complete; 0 never; None for $GPUMEM_RECONNECT_MS,
    else 10. A daemon that stays away is errc.io_error; one that restarted without this
    session's state is errc.session_lost, for every later call too.
    Raises gpumem.Error (errc.io_error) when no daemon answers, with the path in its text.
    """
    path = "" if socket_path is None else os.fspath(socket_path)
    return _gpumem.connect(path, _program_name() if label is None else label, reconnect_for)
