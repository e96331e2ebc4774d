"""Shared fixtures: where the repository and its test data are; tests that run alone."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Under xdist, a test marked `alone` (it bounds wall time: loop lag, fail-over, a
    search budget) runs while no other worker of this run runs a test.

    Every test holds a lock file shared (`alone` ones: exclusive) for its whole protocol.
    A second lock, taken briefly before it, is held by an `alone` test while it waits,
    so that the other workers, which keep starting tests, cannot starve it.
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # not under xdist: nothing runs beside it
        return (yield)
    folder = Path(tempfile.gettempdir())
    alone = item.get_closest_marker("alone") is not None
    with (
        (folder / f"numatopo-pytest-{run}.turnstile").open("a") as turnstile,
        (folder / f"numatopo-pytest-{run}.lock").open("a") as lock,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        return (yield)
