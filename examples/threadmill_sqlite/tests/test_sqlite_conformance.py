"""The conformance kit (`threadmill_core.testing`), all of it, run on the SQLite backend.

Each test runs twice (see `conftest.py`): on a fake clock, where the kit
compares every timestamp, and on SQLite's own clock, shifted forward.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from threadmill_core.models import JSON
from threadmill_core.testing import (
    BAD_INPUT_CASES,
    PAYLOAD_CASES,
    SCENARIOS,
    Harness,
    HarnessFactory,
    check_payload_round_trip,
    run_machine,
)
from threadmill_core.testing.strategies import json_values


@pytest.mark.slow
def test_backend_matches_the_model(harness_factory: HarnessFactory) -> None:
    """Every sequence of operations leaves the SQLite backend answering as the model does."""
    run_machine(harness_factory)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario(harness: Harness, name: str) -> None:
    """Each named race and ordering scenario of the kit holds on SQLite."""
    SCENARIOS[name](harness)


@pytest.mark.parametrize("case", sorted(PAYLOAD_CASES))
def test_payload_round_trips(harness: Harness, case: str) -> None:
    """The kit's named edge-case value comes back unchanged from every read."""
    check_payload_round_trip(harness, PAYLOAD_CASES[case])


# The fixture is a factory: each example builds (and closes) its own harness.
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=json_values(max_leaves=12))
def test_any_codec_value_round_trips(harness_factory: HarnessFactory, value: JSON) -> None:
    """Any value the codec carries comes back unchanged from every read."""
    harness = harness_factory()
    try:
        check_payload_round_trip(harness, value)
    finally:
        harness.close()


@pytest.mark.parametrize("case", sorted(BAD_INPUT_CASES))
def test_bad_argument_raises_value_error_and_changes_nothing(harness: Harness, case: str) -> None:
    """Each of the kit's bad arguments raises ValueError before anything changes."""
    BAD_INPUT_CASES[case](harness)
