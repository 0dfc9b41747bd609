"""`ConformanceSuite`: the whole conformance kit as one pytest test class.

A backend's tests opt in with a fixture and a subclass (the ``threadmill``
pytest plugin, `threadmill_core.testing.pytest_plugin`, supplies the rest)::

    # conftest.py
    @pytest.fixture
    def threadmill_harness_factory() -> HarnessFactory:
        return on_fake_clock(lambda clock: MyBackend(clock=clock, result_ttl=TTL), result_ttl=TTL)

    # test_conformance.py
    from threadmill_core.testing import ConformanceSuite

    class TestConformance(ConformanceSuite):
        pass

Each test takes a fresh backend from the factory: the state machine and the
payload fuzz build one per generated example, the named cases one per test.
Every test carries the ``threadmill_conformance`` marker. Hypothesis runs
under the active settings profile, so the caller's profile decides how
thorough the state machine and the fuzz are.
"""

from __future__ import annotations

import hypothesis
import pytest

from threadmill_core.models import JSON
from threadmill_core.testing.argument_cases import ARGUMENT_CASES
from threadmill_core.testing.harness import Harness, HarnessFactory
from threadmill_core.testing.machine import run_machine
from threadmill_core.testing.scenarios import (
    BAD_INPUT_CASES,
    PAYLOAD_CASES,
    SCENARIOS,
    check_payload_round_trip,
)
from threadmill_core.testing.strategies import json_values


def run_payload_fuzz(factory: HarnessFactory, settings: hypothesis.settings | None = None) -> None:
    """Send generated codec values through `check_payload_round_trip`, each on a fresh backend.

    `settings` defaults to the active Hypothesis profile.
    """
    chosen = settings if settings is not None else hypothesis.settings()

    @hypothesis.settings(chosen)
    @hypothesis.given(value=json_values(max_leaves=12))
    def round_trip(value: JSON) -> None:
        harness = factory()
        try:
            check_payload_round_trip(harness, value)
        finally:
            harness.close()

    round_trip()


@pytest.mark.threadmill_conformance
class ConformanceSuite:
    """Every test of the conformance kit; subclass it as ``Test...`` to run it on a backend.

    The tests take the ``threadmill_harness_factory`` fixture, which the
    subclass's module, class or conftest.py must define, and
    ``threadmill_harness``, one harness from it that the plugin closes
    afterwards.
    """

    def test_backend_matches_the_model(self, threadmill_harness_factory: HarnessFactory) -> None:
        """Every sequence of operations leaves the backend answering exactly as the model does."""
        run_machine(threadmill_harness_factory)

    @pytest.mark.parametrize("scenario", sorted(SCENARIOS))
    def test_scenario(self, threadmill_harness: Harness, scenario: str) -> None:
        """The named race or ordering scenario (see threadmill_core.testing.scenarios) holds."""
        SCENARIOS[scenario](threadmill_harness)

    @pytest.mark.parametrize("case", sorted(PAYLOAD_CASES))
    def test_payload_round_trips(self, threadmill_harness: Harness, case: str) -> None:
        """The named edge-case value comes back unchanged from every read."""
        check_payload_round_trip(threadmill_harness, PAYLOAD_CASES[case])

    def test_any_codec_value_round_trips(self, threadmill_harness_factory: HarnessFactory) -> None:
        """Any value the codec carries comes back unchanged from every read."""
        run_payload_fuzz(threadmill_harness_factory)

    @pytest.mark.parametrize("case", sorted(BAD_INPUT_CASES))
    def test_bad_argument_is_refused(self, threadmill_harness: Harness, case: str) -> None:
        """The named bad argument raises its documented exception and changes nothing."""
        BAD_INPUT_CASES[case](threadmill_harness)

    @pytest.mark.parametrize("case", sorted(ARGUMENT_CASES))
    def test_bad_limit_or_offset_is_refused(self, threadmill_harness: Harness, case: str) -> None:
        """A limit or offset of the wrong type (True, "1") or past `MAX_COUNT` raises ValueError
        and changes nothing; `MAX_COUNT` itself is taken."""
        ARGUMENT_CASES[case](threadmill_harness)
