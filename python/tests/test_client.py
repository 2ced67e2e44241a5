"""The client as a whole: connecting, what it reports (as gpumemctl --json does), the stream
arguments it accepts, and the type stubs and dynamic symbols of the native module."""

from __future__ import annotations

import ast
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

import gpumem
import support


def gpumemctl_json(daemon, *command: str):
    program = support.built_program("GPUMEM_TEST_CTL", "client/gpumemctl")
    output = subprocess.run(
        [program, "--socket", daemon.socket_path, *command, "--json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(output)


def without_volatile(records, *keys: str):
    return [{key: value for key, value in record.items() if key not in keys} for record in records]


def test_connect_finds_the_daemon_through_gpumem_socket_and_labels_the_script(daemon):
    client = gpumem.connect()
    assert client.socket_path == daemon.socket_path
    client.ping()
    mine = [each for each in client.clients() if each["self"]]
    assert [each["label"] for each in mine] == [pathlib.Path(sys.argv[0]).name]
    assert gpumem.connect(label="worker-3").clients()[-1]["label"] == "worker-3"


def test_reports_are_what_gpumemctl_prints_as_json(daemon, client):
    buffer = client.allocate(8192, name="weights")
    lock = client.lock("model.weights")
    barrier = client.barrier("stage", 2)
    # gpumemctl is a client too, and the clock moves between two answers.
    stats = client.stats()
    stats["clients"] += 1
    assert stats == gpumemctl_json(daemon, "stats")
    assert client.allocations() == gpumemctl_json(daemon, "allocations")
    assert client.reservations() == gpumemctl_json(daemon, "reservations")
    assert client.sync_objects() == gpumemctl_json(daemon, "locks")
    theirs = [each for each in gpumemctl_json(daemon, "clients") if each["label"] != "gpumemctl"]
    ours = client.clients()
    assert without_volatile(ours, "connected_ms", "self") == without_volatile(
        theirs, "connected_ms", "self"
    )
    status = client.status()
    status["clients"] += 1
    assert without_volatile([status], "uptime_ms") == without_volatile(
        [gpumemctl_json(daemon, "status")], "uptime_ms"
    )
    assert client.allocations()[0]["name"] == "weights"
    # gpumemctl's own connection counts for the uid while it asks.
    usage = client.usage()
    for each in usage:
        each["connections"] += 1
    assert usage == gpumemctl_json(daemon, "quotas")
    assert buffer and lock and barrier


def test_a_mode_says_who_else_may_open_and_a_bad_one_is_refused(client):
    shared = client.allocate(4096, name="for-the-group", mode=0o640)
    lock = client.lock("group-lock", mode=0o660)
    assert shared and lock
    with pytest.raises(gpumem.Error) as refused:
        client.allocate(4096, name="odd", mode=0o10000)
    assert refused.value.code == gpumem.errc.invalid_argument
    mine = [each for each in client.usage()]
    assert len(mine) == 1 and mine[0]["allocations"] == 1 and mine[0]["sync_objects"] == 1


class CudaStreamProtocol:
    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


class TorchLikeStream:
    """What gpumem reads of a torch.cuda.Stream: its module and its cuda_stream."""

    __module__ = "torch.cuda.streams"
    cuda_stream = 0


class CupyLikeStream:
    __module__ = "cupy.cuda.stream"
    ptr = 0


@pytest.mark.parametrize(
    "stream",
    [None, 0, CudaStreamProtocol(0), TorchLikeStream(), CupyLikeStream()],
    ids=["none", "int", "cuda_stream_protocol", "torch", "cupy"],
)
def test_stream_arguments_take_every_stream_kind_without_importing_torch_or_cupy(client, stream):
    with client.allocate(4096, stream=stream) as buffer:
        assert buffer.size == 4096
    assert "torch" not in sys.modules and "cupy" not in sys.modules


@pytest.mark.parametrize(
    "stream, error",
    [("a stream", TypeError), (-1, ValueError), (CudaStreamProtocol(-5), ValueError)],
)
def test_anything_else_as_a_stream_is_refused(client, stream, error):
    with pytest.raises(error):
        client.allocate(4096, stream=stream)


def stub_names(stub: pathlib.Path) -> set[str]:
    tree = ast.parse(stub.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_") or name == "__version__"}


def test_the_stubs_describe_every_public_name_of_the_native_module():
    from gpumem import _gpumem

    stub = pathlib.Path(gpumem.__file__).with_name("_gpumem.pyi")
    public = {name for name in dir(_gpumem) if not name.startswith("_")} | {"__version__"}
    assert stub_names(stub) - {"StreamLike", "Timeout"} == public
    assert pathlib.Path(gpumem.__file__).with_name("py.typed").exists()
    assert set(gpumem.__all__) == public - {"__version__"} | {"connect"}


def test_the_native_module_exports_its_init_function_alone():
    # A symbol it exported (the client library's, or libstdc++'s where the toolchain links it
    # statically) is unified with any other copy in the process: with numpy's libstdc++.so.6
    # loaded first, an std::ifstream in the module crashed (python/native/exports.map).
    from gpumem import _gpumem

    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    listing = subprocess.run(
        [nm, "--dynamic", "--defined-only", _gpumem.__file__],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert [line.split()[-1] for line in listing.splitlines() if line.strip()] == ["PyInit__gpumem"]
