"""Buffers in one process: the buffer protocol, DLPack (0.x and 1.0), read-only memory, and
lifetime: memory is let go only when the Buffer and everything made from it are gone."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import gpumem
import support

SIZE = 64 << 10


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


def capsule_name(capsule) -> bytes:
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get_name(capsule)


def versioned_tensor(capsule) -> DLManagedTensorVersioned:
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = get_pointer(capsule, b"dltensor_versioned")
    return DLManagedTensorVersioned.from_address(address)


def test_a_host_buffer_is_a_writable_memoryview_of_its_bytes(client):
    buffer = client.allocate(SIZE, name="frames")
    view = memoryview(buffer)
    assert (view.nbytes, view.format, view.readonly) == (SIZE, "B", False)
    view[:4] = b"abcd"
    assert bytes(memoryview(buffer)[:4]) == b"abcd"
    assert (buffer.size, buffer.device, buffer.read_only) == (SIZE, gpumem.HOST, False)
    assert buffer.ptr == ctypes.addressof(ctypes.c_char.from_buffer(view))


def test_numpy_takes_a_host_buffer_through_dlpack_without_a_copy(client):
    buffer = client.allocate(SIZE)
    array = np.from_dlpack(buffer)
    assert (array.dtype, array.shape) == (np.uint8, (SIZE,))
    assert array.ctypes.data == buffer.ptr
    memoryview(buffer)[:3] = b"\x01\x02\x03"
    assert list(array[:3]) == [1, 2, 3]
    assert buffer.__dlpack_device__() == (1, 0)
    assert not hasattr(buffer, "__cuda_array_interface__")


def test_dlpack_gives_a_versioned_capsule_to_consumers_of_1_0_and_a_plain_one_otherwise(client):
    buffer = client.allocate(SIZE)
    assert capsule_name(buffer.__dlpack__()) == b"dltensor"
    assert capsule_name(buffer.__dlpack__(max_version=(0, 8))) == b"dltensor"
    capsule = buffer.__dlpack__(max_version=(1, 2))
    assert capsule_name(capsule) == b"dltensor_versioned"
    managed = versioned_tensor(capsule)
    tensor = managed.dl_tensor
    assert (managed.major, managed.minor, managed.flags) == (1, 0, 0)
    assert (tensor.data, tensor.device_type, tensor.ndim) == (buffer.ptr, 1, 1)
    assert (tensor.code, tensor.bits, tensor.lanes) == (1, 8, 1)
    assert (tensor.shape[0], tensor.strides[0], tensor.byte_offset) == (SIZE, 1, 0)


def test_a_read_only_open_gives_read_only_memory(client):
    weights = client.allocate(SIZE, name="weights")
    same = client.open("weights", read_only=True)
    assert same.id == weights.id
    assert same.read_only
    view = memoryview(same)
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1
    assert not np.frombuffer(same, dtype=np.uint8).flags.writeable
    assert versioned_tensor(same.__dlpack__(max_version=(1, 0))).flags & 1 == 1
    # A DLPack 0.x consumer cannot be told: its first write would fault, so it is refused.
    with pytest.raises(BufferError, match="read-only"):
        same.__dlpack__()


def test_a_write_to_read_only_memory_faults_in_the_writer(daemon):
    with support.python_peer("hold-new", "weights", SIZE, 1) as holder:
        assert holder.line().startswith("ready")
        writer = support.python_peer("write-read-only", "weights")
        assert writer.wait() == -11  # SIGSEGV: the mapping has no write permission
        verifier = support.python_peer("verify", "weights", SIZE, 1)
        assert verifier.line() == "ok"


def test_dlpack_refuses_copies_and_other_devices(client):
    buffer = client.allocate(SIZE)
    with pytest.raises(BufferError, match="copies"):
        buffer.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="device"):
        buffer.__dlpack__(dl_device=(2, 0))
    assert capsule_name(buffer.__dlpack__(dl_device=(1, 0), copy=False)) == b"dltensor"
    # NumPy's integers and bools are integers and bools too (from_dlpack passes copy through).
    assert capsule_name(buffer.__dlpack__(dl_device=(np.int32(1), np.int64(0)))) == b"dltensor"
    assert capsule_name(buffer.__dlpack__(copy=np.False_)) == b"dltensor"
    with pytest.raises(BufferError, match="copies"):
        buffer.__dlpack__(copy=np.True_)


@pytest.mark.parametrize(
    "arguments",
    [
        {"dl_device": ("a", "b")},
        {"dl_device": (1,)},
        {"dl_device": (True, 0)},
        {"max_version": ("1", 0)},
        {"copy": "no"},
        {"stream": "x"},
    ],
)
def test_dlpack_arguments_of_the_wrong_type_are_type_errors(client, arguments):
    with pytest.raises(TypeError, match="__dlpack__"):
        client.allocate(SIZE).__dlpack__(**arguments)


def test_an_array_keeps_the_memory_after_the_buffer_is_gone(daemon, client):
    buffer = client.allocate(SIZE)
    np.frombuffer(buffer, dtype=np.uint8)[:] = support.pattern(SIZE, 7)
    array = np.from_dlpack(buffer)
    del buffer
    gc.collect()
    assert daemon.bytes_in_use() == SIZE
    assert support.first_mismatch(array, 7) == SIZE
    del array
    assert daemon.wait_for_bytes_in_use(0)


def test_release_leaves_the_memory_to_the_exports_that_hold_it(daemon, client):
    buffer = client.allocate(SIZE)
    array = np.from_dlpack(buffer)
    view = memoryview(buffer)
    buffer.release()
    assert buffer.released
    with pytest.raises(BufferError, match="released"):
        buffer.ptr
    view[0] = 9
    assert array[0] == 9
    del array
    assert daemon.bytes_in_use() == SIZE  # the memoryview still holds it
    view.release()
    assert daemon.wait_for_bytes_in_use(0)


def test_an_unconsumed_capsule_lets_go_of_the_memory(daemon, client):
    buffer = client.allocate(SIZE)
    capsules = [buffer.__dlpack__(), buffer.__dlpack__(max_version=(1, 0))]
    buffer.release()
    assert daemon.bytes_in_use() == SIZE
    del capsules
    assert daemon.wait_for_bytes_in_use(0)


def test_a_with_block_releases_at_its_end(daemon, client):
    with client.allocate(SIZE, name="scratch") as buffer:
        assert daemon.bytes_in_use() == SIZE
    assert buffer.released
    assert daemon.bytes_in_use() == 0
    with pytest.raises(gpumem.Error):
        client.open("scratch")


def test_the_sole_holder_releases_at_once_and_reports_the_daemons_answer(daemon, client):
    buffer = client.allocate(SIZE)
    buffer.release()
    assert daemon.bytes_in_use() == 0
    buffer.release()  # a second release does nothing
    assert "released" in repr(buffer)
