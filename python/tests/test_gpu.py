"""gpumem with PyTorch, CuPy and JAX on a GPU. Each test skips, with the reason, where there is
no CUDA device, no CUDA backend in gpumemd, or not the library it needs.
On the GPU machine: `ctest --test-dir build -L gpu -R Python --output-on-failure`."""

from __future__ import annotations

import gc
import importlib.util
import sys

import pytest

import gpumem
import support
from test_buffers import capsule_name, versioned_tensor

pytestmark = pytest.mark.gpu

SIZE = 4 << 20


def torch_on_a_gpu():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device is visible to PyTorch")
    return torch


@pytest.fixture
def cuda_client(client):
    if not client.status()["cuda"]:
        pytest.skip("gpumemd has no CUDA backend here (no driver or no device)")
    return client


def cuda_pool(client: gpumem.Client) -> dict:
    return next(pool for pool in client.stats()["pools"] if pool["device"] == "cuda:0")


def gpu_peer(*arguments: object) -> support.Process:
    """tests/gpu/gpu_peer.cpp: a CUDA client in C++."""
    program = support.built_program("GPUMEM_TEST_GPU_PEER", "tests/gpumem_gpu_peer")
    return support.Process([program, *map(str, arguments)])


WRITERS = {
    "python": lambda name, seed: support.python_peer("torch-produce", name, SIZE, seed),
    "cpp": lambda name, seed: gpu_peer("produce", name, SIZE, seed),
}


@pytest.mark.parametrize("writer", WRITERS)
def test_torch_reads_a_buffer_another_process_wrote(cuda_client, writer):
    torch = torch_on_a_gpu()
    with WRITERS[writer]("weights", 21) as producer:
        assert producer.line(timeout=120).startswith("ready")
        stream = torch.cuda.Stream(device=0)
        buffer = cuda_client.open("weights", stream=stream)
        with torch.cuda.stream(stream):
            tensor = torch.from_dlpack(buffer)
            assert (tensor.device, tensor.dtype, tensor.shape) == (
                torch.device("cuda", 0),
                torch.uint8,
                (SIZE,),
            )
            assert tensor.data_ptr() == buffer.ptr
            assert support.first_mismatch(tensor.cpu().numpy(), 21) == SIZE


def test_a_cpp_process_reads_what_torch_wrote(cuda_client):
    torch = torch_on_a_gpu()
    stream = torch.cuda.Stream(device=0)
    buffer = cuda_client.allocate(SIZE, device=0, name="weights", stream=stream)
    with torch.cuda.stream(stream):
        torch.from_dlpack(buffer).copy_(torch.from_numpy(support.pattern(SIZE, 24)))
    stream.synchronize()
    reader = gpu_peer("consume", "weights", SIZE, 24)
    assert reader.line(timeout=120) == "ok"


@pytest.mark.parametrize("writer", WRITERS)
def test_cupy_reads_a_buffer_another_process_wrote(cuda_client, writer):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    with WRITERS[writer]("weights", 22) as producer:
        assert producer.line(timeout=120).startswith("ready")
        buffer = cuda_client.open("weights", stream=cupy.cuda.get_current_stream())
        through_dlpack = cupy.from_dlpack(buffer)
        through_interface = cupy.asarray(buffer)  # __cuda_array_interface__
        for array in (through_dlpack, through_interface):
            assert array.data.ptr == buffer.ptr
            assert support.first_mismatch(cupy.asnumpy(array), 22) == SIZE


def test_cupy_reads_through_the_array_interface_after_the_buffer_is_released(cuda_client):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    in_use = cuda_pool(cuda_client)["bytes_in_use"]
    with cuda_client.allocate(SIZE, device=0) as buffer:
        array = cupy.asarray(buffer)  # __cuda_array_interface__: CuPy holds the Buffer object
        array[:] = cupy.asarray(support.pattern(SIZE, 25))
    assert buffer.released
    with pytest.raises(BufferError):
        buffer.__cuda_array_interface__
    del buffer
    gc.collect()
    assert cuda_pool(cuda_client)["bytes_in_use"] == in_use + SIZE
    assert support.first_mismatch(cupy.asnumpy(array), 25) == SIZE
    del array
    gc.collect()
    assert support.wait_until(lambda: cuda_pool(cuda_client)["bytes_in_use"] == in_use, 5)


@pytest.mark.parametrize("writer", WRITERS)
def test_jax_reads_a_buffer_another_process_wrote(cuda_client, writer):
    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed")
    with WRITERS[writer]("weights", 23) as producer:
        assert producer.line(timeout=120).startswith("ready")
        reader = support.python_peer("jax-verify", "weights", SIZE, 23)
        assert reader.line(timeout=120) == "ok"


def test_the_dlpack_stream_orders_the_consumer_after_the_producer_without_a_host_wait(
    cuda_client,
):
    torch = torch_on_a_gpu()
    if not hasattr(torch.cuda, "_sleep"):
        pytest.skip("this PyTorch has no torch.cuda._sleep to keep a stream busy")
    producer = torch.cuda.Stream(device=0)
    consumer = torch.cuda.Stream(device=0)
    buffer = cuda_client.allocate(SIZE, device=0, stream=producer)
    with torch.cuda.stream(producer):
        written = torch.from_dlpack(buffer)
        written.zero_()
        producer.synchronize()
        torch.cuda._sleep(2_000_000_000)  # about a second of GPU time before the write
        written.fill_(7)
    with torch.cuda.stream(consumer):
        seen = torch.from_dlpack(buffer).clone()  # torch passes __dlpack__(stream=consumer)
    assert not producer.query(), "the host waited for the producer"
    consumer.synchronize()
    assert bool((seen == 7).all()), "the consumer ran before the producer's write"


def test_releasing_a_held_buffer_on_a_stream_orders_its_later_free_after_that_stream(
    cuda_client,
):
    torch = torch_on_a_gpu()
    if not hasattr(torch.cuda, "_sleep"):
        pytest.skip("this PyTorch has no torch.cuda._sleep to keep a stream busy")
    buffer_stream = torch.cuda.Stream(device=0)
    last_use = torch.cuda.Stream(device=0)
    in_use = cuda_pool(cuda_client)["bytes_in_use"]
    buffer = cuda_client.allocate(SIZE, device=0, stream=buffer_stream)
    tensor = torch.from_dlpack(buffer)  # holds the memory past release()
    torch.cuda.synchronize()
    with torch.cuda.stream(last_use):
        torch.cuda._sleep(2_000_000_000)  # about a second of GPU time before the last use
        tensor.fill_(5)
    buffer.release(stream=last_use)
    # The tensor's memory is freed later on the buffer's stream: work queued there from now on
    # must wait for the last use.
    after_release = torch.cuda.Event()
    after_release.record(buffer_stream)
    assert not last_use.query(), "the host waited for the last use"
    assert not after_release.query(), "the buffer's stream does not wait for the last use"
    after_release.synchronize()
    assert last_use.query()
    del tensor
    assert support.wait_until(lambda: cuda_pool(cuda_client)["bytes_in_use"] == in_use, 5)


def test_a_stream_ordered_lock_from_torch_streams_counts_exactly_across_three_processes(
    cuda_client,
):
    torch = torch_on_a_gpu()
    stream = torch.cuda.Stream(device=0)
    counter = cuda_client.allocate(8, device=0, name="counter", stream=stream)
    with torch.cuda.stream(stream):
        torch.from_dlpack(counter).zero_()
    stream.synchronize()
    iterations = 200
    counters = [
        support.python_peer("stream-lock-count", "count", "counter", iterations) for _ in range(3)
    ]
    for each in counters:
        assert each.line(timeout=240) == "done"
        assert each.wait() == 0
    with torch.cuda.stream(stream):
        total = int(torch.from_dlpack(counter).view(torch.int64)[0])
    assert total == 3 * iterations


def test_a_sigkilled_python_holders_memory_returns_to_the_device(daemon, cuda_client):
    torch_on_a_gpu()
    before = cuda_pool(cuda_client)
    size = 256 << 20
    with support.python_peer("torch-hold", size) as holder:
        assert holder.line(timeout=120).startswith("ready")
        assert cuda_pool(cuda_client)["bytes_in_use"] == before["bytes_in_use"] + size
        holder.kill()
    assert support.wait_until(
        lambda: cuda_pool(cuda_client)["bytes_in_use"] == before["bytes_in_use"], 5
    )
    assert cuda_pool(cuda_client)["allocations"] == before["allocations"]


def test_a_tensor_keeps_cuda_memory_after_the_buffer_is_gone(cuda_client):
    torch = torch_on_a_gpu()
    in_use = cuda_pool(cuda_client)["bytes_in_use"]
    tensor = torch.from_dlpack(cuda_client.allocate(SIZE, device=0))
    gc.collect()
    assert cuda_pool(cuda_client)["bytes_in_use"] == in_use + SIZE
    tensor.fill_(3)
    torch.cuda.synchronize()
    del tensor
    assert support.wait_until(lambda: cuda_pool(cuda_client)["bytes_in_use"] == in_use, 5)


def test_a_cuda_buffer_describes_itself_to_every_protocol(cuda_client):
    weights = cuda_client.allocate(SIZE, device=0, name="weights")
    same = cuda_client.open("weights", read_only=True)
    assert weights.__dlpack_device__() == same.__dlpack_device__() == (2, 0)
    interface = same.__cuda_array_interface__
    assert interface == {
        "shape": (SIZE,),
        "typestr": "|u1",
        "data": (same.ptr, True),
        "strides": None,
        "version": 3,
        "stream": 1,  # the buffer's stream: the legacy default stream
    }
    with pytest.raises(BufferError, match="CUDA"):
        memoryview(weights)
    capsule = same.__dlpack__(max_version=(1, 0), stream=-1)
    assert capsule_name(capsule) == b"dltensor_versioned"
    tensor = versioned_tensor(capsule).dl_tensor
    assert versioned_tensor(capsule).flags & 1 == 1
    assert (tensor.device_type, tensor.device_id, tensor.data) == (2, 0, same.ptr)
    with pytest.raises(ValueError):
        same.__dlpack__(stream=0)


def test_the_share_tensor_example_shares_a_tensor_between_two_processes(cuda_client):
    torch_on_a_gpu()
    example = support.REPOSITORY / "examples/python/share_tensor.py"
    run = support.Process([sys.executable, str(example)])
    lines = [run.line(timeout=120) for _ in range(3)]
    assert run.wait() == 0, lines
    assert "on cuda:0" in lines[0] and "every element as written" in lines[1], lines


def test_the_shared_weights_example_gives_every_worker_the_same_output(cuda_client, tmp_path):
    torch_on_a_gpu()
    example = support.REPOSITORY / "examples/python/shared_weights.py"
    model = tmp_path / "model.safetensors"
    run = support.Process(
        [sys.executable, str(example), "--workers", "2", "--gib", "0.125", "--file", str(model)]
    )
    lines = run.output()
    assert run.wait() == 0, lines
    assert lines[-1] == "every worker computed the same output", lines


def cuda_reservation(client: gpumem.Client, name: str, seed: int) -> gpumem.Reservation:
    """A reservation on device 0 at version 1, holding SIZE bytes of the pattern of @p seed."""
    torch = torch_on_a_gpu()
    reservation = client.reserve(16 * SIZE, device=0, name=name, initial=SIZE)
    torch.from_dlpack(reservation)[:SIZE].copy_(torch.from_numpy(support.pattern(SIZE, seed)))
    torch.cuda.synchronize()
    return reservation


def test_torch_takes_a_cuda_reservation_through_dlpack_at_its_fixed_address(cuda_client):
    torch = torch_on_a_gpu()
    weights = cuda_reservation(cuda_client, "weights", 31)
    tensor = torch.from_dlpack(weights)
    assert (tensor.device, tensor.dtype, tensor.shape) == (
        torch.device("cuda", 0),
        torch.uint8,
        (weights.size,),
    )
    assert tensor.data_ptr() == weights.ptr
    assert weights.__dlpack_device__() == (2, 0)
    assert support.first_mismatch(tensor[:SIZE].cpu().numpy(), 31) == SIZE
    with pytest.raises(BufferError, match="CUDA"):
        memoryview(weights)


def test_torch_in_another_process_sees_each_version_at_one_address(cuda_client):
    torch = torch_on_a_gpu()
    weights = cuda_reservation(cuda_client, "weights", 1)
    with support.python_peer("torch-follow-reservation", "weights", SIZE, 3) as reader:
        ready, version, address = reader.line(timeout=120).split()
        assert (ready, version) == ("ready", "1")
        for version in (2, 3):
            with weights.begin_version(SIZE) as draft:
                torch.from_dlpack(draft)[:SIZE].copy_(
                    torch.from_numpy(support.pattern(SIZE, version))
                )
                torch.cuda.synchronize()
                draft.commit()
            assert reader.line(timeout=60) == f"version {version} {address} ok"
        assert reader.wait() == 0


def test_a_cuda_reservation_wakes_with_its_bytes_under_the_same_tensor(cuda_client):
    torch = torch_on_a_gpu()
    weights = cuda_reservation(cuda_client, "weights", 32)
    tensor = torch.from_dlpack(weights)  # made once, used again after the wake
    weights.sleep()
    assert weights.size == 0 and weights.status().host_bytes >= SIZE
    weights.wake()
    assert weights.ptr == tensor.data_ptr()
    assert support.first_mismatch(tensor[:SIZE].cpu().numpy(), 32) == SIZE


def test_cupy_reads_a_cuda_reservation_through_both_protocols(cuda_client):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    weights = cuda_reservation(cuda_client, "weights", 33)
    through_dlpack = cupy.from_dlpack(weights)
    through_interface = cupy.asarray(weights)  # __cuda_array_interface__
    for array in (through_dlpack, through_interface):
        assert array.data.ptr == weights.ptr
        assert support.first_mismatch(cupy.asnumpy(array[:SIZE]), 33) == SIZE


def test_the_hot_swap_example_switches_torch_readers_on_the_gpu(cuda_client, daemon):
    torch_on_a_gpu()
    example = support.REPOSITORY / "examples/python/hot_swap_weights.py"
    run = support.Process(
        [sys.executable, str(example), "--socket", daemon.socket_path, "--device", "cuda"]
    )
    lines = run.output(timeout=300)
    assert run.wait() == 0, lines
    assert "on cuda" in lines[0], lines
    assert lines[-1].startswith("every reader saw versions 1 to 3"), lines
