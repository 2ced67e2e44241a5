"""How skips count for ctest, a pytest plugin that conftest.py loads. A run whose collected
tests all skipped exits 5, as pytest does when it collects none, so that ctest
(SKIP_RETURN_CODE 5) shows it skipped rather than passed. With GPUMEM_REQUIRE_GPU=1 a skipped
test marked `gpu` fails instead, so that a GPU machine cannot pass on tests that never ran."""

from __future__ import annotations

import os

import pytest

REQUIRE_GPU = "GPUMEM_REQUIRE_GPU"

passes = pytest.StashKey[int]()


def gpu_required() -> bool:
    return os.environ.get(REQUIRE_GPU) == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"gpu: needs a CUDA device (skips itself, with the reason, elsewhere; fails instead "
        f"under {REQUIRE_GPU}=1)",
    )
    config.stash[passes] = 0


def skip_reason(report: pytest.TestReport) -> str:
    """What pytest.skip() was told; a skip's report holds (path, line, "Skipped: reason")."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = (yield).get_result()
    if report.skipped and gpu_required() and item.get_closest_marker("gpu") is not None:
        report.longrepr = f"{REQUIRE_GPU}=1 and this GPU test skipped: {skip_reason(report)}"
        report.outcome = "failed"
    if report.passed and report.when == "call":
        item.config.stash[passes] += 1


def pytest_sessionfinish(session: pytest.Session) -> None:
    only_skips = session.testscollected > 0 and session.config.stash[passes] == 0
    if session.exitstatus == pytest.ExitCode.OK and only_skips:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
