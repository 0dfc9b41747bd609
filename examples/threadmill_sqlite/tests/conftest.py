"""Fixtures for the SQLite backend's tests: Hypothesis profiles and the kit's harness factory.

The conformance kit (threadmill's ``threadmill`` pytest plugin) takes the
`threadmill_harness_factory` fixture below and runs twice: on
`FakeClockBackend` (the kit's exact mode: every timestamp compared) and on
`ShiftedClockBackend` (SQLite's own clock, shifted forward by `advance`;
timestamps checked for presence and order). Both share every line of
`SQLiteBackend` except the clock read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from threadmill_core.testing import Harness, HarnessFactory

from threadmill_sqlite import SQLiteBackend
from threadmill_sqlite.testing import ShiftedClockBackend, make_harness

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

settings.register_profile(
    "dev",
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if IN_CI else "dev"))

#: Results are kept this long in every backend under test; the kit never
#: advances the clock past it.
RESULT_TTL = timedelta(days=7)


def exact_harness() -> Harness:
    """A fresh database on a fake clock."""
    return make_harness(result_ttl=RESULT_TTL, exact=True)


def shifted_harness() -> Harness:
    """A fresh database on SQLite's clock, shifted by the kit's advances."""
    return make_harness(result_ttl=RESULT_TTL, exact=False)


HARNESSES: dict[str, HarnessFactory] = {
    "fake_clock": exact_harness,
    "sqlite_clock": shifted_harness,
}


@pytest.fixture(params=sorted(HARNESSES))
def threadmill_harness_factory(request: pytest.FixtureRequest) -> HarnessFactory:
    """The conformance kit's backend under test: a fresh database file, once per clock."""
    return HARNESSES[request.param]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where a test's database file goes (created by the first backend that opens it)."""
    return tmp_path / "queue.db"


@pytest.fixture
def backend(db_path: Path) -> Iterator[ShiftedClockBackend]:
    """A backend on SQLite's clock that the test can move forward."""
    built = ShiftedClockBackend(db_path, result_ttl=RESULT_TTL)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def plain_backend(db_path: Path) -> Iterator[SQLiteBackend]:
    """The shipped backend, exactly as `connect` builds it."""
    built = SQLiteBackend(db_path)
    try:
        yield built
    finally:
        built.close()
