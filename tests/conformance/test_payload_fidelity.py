"""Payload values survive enqueue, claim, complete and get value for value, on every backend."""

import pytest
from hypothesis import HealthCheck, given, settings

from threadmill_core.models import JSON
from threadmill_core.testing import PAYLOAD_CASES, Harness, HarnessFactory, check_payload_round_trip
from threadmill_core.testing.strategies import json_values


@pytest.mark.parametrize("case", sorted(PAYLOAD_CASES))
def test_payload_round_trips(harness: Harness, case: str) -> None:
    """The named edge-case value comes back unchanged from every read."""
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
