"""Every failure is a gpumem.Error (an OSError) whose code is a gpumem.errc member and whose
text names the object and the cause."""

from __future__ import annotations

import datetime
import re
import signal

import numpy as np
import pytest

import gpumem
import support


def raised_by(call) -> gpumem.Error:
    with pytest.raises(gpumem.Error) as raised:
        call()
    return raised.value


def test_errc_has_every_code_of_the_cpp_table_by_name_and_number():
    table = (support.REPOSITORY / "proto/include/gpumem/proto/errc.hpp").read_text()
    codes = {name: int(number) for name, number in re.findall(r"X\((\w+), (\d+),", table)}
    assert len(codes) > 20
    assert {member.name: int(member) for member in gpumem.errc.__members__.values()} == codes


def test_an_error_is_an_oserror_with_a_code_and_the_daemons_words(client):
    error = raised_by(lambda: client.open("missing"))
    assert isinstance(error, OSError)
    assert error.code == gpumem.errc.not_found and error.code.name == "not_found"
    assert "missing" in str(error) and "no such object" in str(error)


@pytest.mark.parametrize(
    "call, code",
    [
        (lambda client: client.allocate(4096, name="bad name!"), "invalid_name"),
        (lambda client: client.allocate(0), "invalid_argument"),
        (lambda client: client.allocate(4096, device=7), "no_such_device"),
        (lambda client: client.allocate(2 << 30), "out_of_memory"),
        (lambda client: client.allocate(4096, pool="nowhere"), "not_found"),
        (lambda client: client.lock("a" * 64), "invalid_name"),
        (lambda client: client.lock("free").unlock(), "not_lock_owner"),
    ],
)
def test_each_refusal_has_its_code(client, call, code):
    assert raised_by(lambda: call(client)).code == getattr(gpumem.errc, code)


def test_a_taken_name_is_already_exists_for_buffers_and_sync_objects(client):
    held = client.allocate(4096, name="taken")
    assert raised_by(lambda: client.allocate(4096, name="taken")).code == gpumem.errc.already_exists
    barrier = client.barrier("stage", 2)
    assert raised_by(lambda: client.lock("stage")).code == gpumem.errc.already_exists
    assert raised_by(lambda: client.barrier("stage", 3)).code == gpumem.errc.invalid_argument
    assert held and barrier


def test_no_daemon_is_an_io_error_naming_the_socket(tmp_path):
    path = tmp_path / "nobody.sock"
    error = raised_by(lambda: gpumem.connect(path))
    assert error.code == gpumem.errc.io_error
    assert str(path) in str(error)


def test_an_error_made_in_python_has_no_code():
    assert gpumem.Error("by hand").code is None
    assert issubclass(gpumem.Error, OSError)


def test_bad_arguments_are_python_errors(client):
    with pytest.raises(TypeError):
        client.allocate("many")
    with pytest.raises(ValueError):
        client.lock("l").acquire(timeout=-1)


@pytest.mark.parametrize(
    "timeout", ["0.1", b"1", True, np.True_, np.timedelta64(500, "ms")], ids=repr
)
def test_a_timeout_that_is_no_duration_is_a_type_error(client, timeout):
    with pytest.raises(TypeError, match="timeout takes seconds"):
        client.lock("l").acquire(timeout=timeout)


def test_a_timeout_is_seconds_or_a_timedelta_and_nan_is_refused(client):
    lock = client.lock("l")
    for timeout in (1, 0.5, np.float64(0.5), datetime.timedelta(milliseconds=500), None):
        assert lock.acquire(timeout=timeout) == gpumem.Acquired.acquired
        lock.unlock()
    with pytest.raises(ValueError, match="NaN"):
        lock.acquire(timeout=float("nan"))


def test_a_socket_path_with_a_null_byte_is_a_value_error(daemon):
    with pytest.raises(ValueError, match="null byte"):
        gpumem.connect(daemon.socket_path + "\0/elsewhere.sock")


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda client: client.open(""), "allocation name '' is not 1-63 characters"),
        # An empty name is not None: it would make the memory anonymous.
        (lambda client: client.allocate(4096, name=""), "allocation name '' is empty"),
        (lambda client: client.reserve(1 << 21, device=gpumem.HOST, name=""), "name '' is empty"),
        (lambda client: client.lock(""), "lock name '' is not 1-63 characters"),
        (lambda client: client.barrier("b0", 0), "barrier 'b0' of 0 parties: a barrier has 1 to"),
        (lambda client: client.barrier("b0", 121), "barrier 'b0' of 121 parties"),
        (lambda client: client.open_reservation(""), "reservation name '' is not 1-63"),
    ],
)
def test_a_refusal_made_before_asking_the_daemon_names_the_object_and_the_rule(
    client, call, words
):
    assert words in str(raised_by(lambda: call(client)))


def test_a_daemon_restarted_without_the_session_is_session_lost(tmp_path):
    from conftest import Daemon

    first = Daemon(tmp_path, [])
    client = gpumem.connect(first.socket_path, reconnect_for=10)
    first.process.kill(signal.SIGKILL)
    second = Daemon(tmp_path, [])
    error = raised_by(client.ping)
    assert error.code == gpumem.errc.session_lost
    assert first.socket_path in str(error)
    assert raised_by(client.ping).code == gpumem.errc.session_lost
    assert second.stop() == 0


def test_a_daemon_that_stays_away_is_an_io_error_after_reconnect_for(tmp_path):
    from conftest import Daemon

    gone = Daemon(tmp_path, [])
    client = gpumem.connect(gone.socket_path, reconnect_for=0.2)
    gone.process.kill(signal.SIGKILL)
    error = raised_by(client.ping)
    assert error.code == gpumem.errc.io_error
    assert gone.socket_path in str(error) and "200 ms" in str(error)
    with pytest.raises(ValueError):
        gpumem.connect(gone.socket_path, reconnect_for=-1)
