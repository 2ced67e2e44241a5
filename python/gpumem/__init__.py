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
    else 30. A daemon that stays away is errc.io_error; one that restarted without this
    session's state is errc.session_lost, for every later call too.
    Raises gpumem.Error (errc.io_error) when no daemon answers, with the path in its text.
    """
    path = "" if socket_path is None else os.fspath(socket_path)
    return _gpumem.connect(path, _program_name() if label is None else label, reconnect_for)
