"""What ctest sees of a pytest run (skip_reporting.py): a run that only skipped exits 5, and
GPUMEM_REQUIRE_GPU=1 turns a GPU test's skip into a failure. Each case runs pytest on a small
suite in a temporary folder."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parent

SKIPPED_GPU_TESTS = """
import pytest

@pytest.fixture
def device():
    pytest.skip("no CUDA device")

@pytest.mark.gpu
def test_skipped_by_its_fixture(device):
    pass

@pytest.mark.gpu
def test_skipped_in_its_body():
    pytest.skip("no CuPy")
"""

SKIPPED_HOST_TEST = """
import pytest

def test_skipped_on_the_host():
    pytest.skip("not this platform")
"""

PASSING_TEST = """
def test_passes():
    pass
"""


def run_pytest(folder: pathlib.Path, source: str, require_gpu: str | None = None):
    (folder / "test_suite.py").write_text(source)
    environment = {k: v for k, v in os.environ.items() if k != "GPUMEM_REQUIRE_GPU"}
    if require_gpu is not None:
        environment["GPUMEM_REQUIRE_GPU"] = require_gpu
    paths = [str(TESTS), environment.get("PYTHONPATH", "")]
    environment["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, "-p", "skip_reporting", "test_suite.py"],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("require_gpu", [None, "0"])
def test_a_run_whose_tests_all_skipped_exits_as_if_none_ran(tmp_path, require_gpu):
    run = run_pytest(tmp_path, SKIPPED_GPU_TESTS, require_gpu)
    assert run.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, run.stdout
    assert "2 skipped" in run.stdout


def test_a_run_with_a_pass_and_skips_passes(tmp_path):
    run = run_pytest(tmp_path, SKIPPED_GPU_TESTS + PASSING_TEST)
    assert run.returncode == pytest.ExitCode.OK, run.stdout
    assert "1 passed, 2 skipped" in run.stdout


def test_require_gpu_fails_every_skipped_gpu_test_with_its_reason(tmp_path):
    run = run_pytest(tmp_path, SKIPPED_GPU_TESTS + PASSING_TEST, require_gpu="1")
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.stdout
    assert "1 failed, 1 passed, 1 error" in run.stdout
    assert "GPUMEM_REQUIRE_GPU=1 and this GPU test skipped: no CUDA device" in run.stdout
    assert "GPUMEM_REQUIRE_GPU=1 and this GPU test skipped: no CuPy" in run.stdout


def test_require_gpu_leaves_the_skips_of_other_tests_alone(tmp_path):
    run = run_pytest(tmp_path, SKIPPED_HOST_TEST, require_gpu="1")
    assert run.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, run.stdout
