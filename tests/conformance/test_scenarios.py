"""The named race and ordering scenarios, run on every registered backend."""

import pytest

from threadmill_core.testing import SCENARIOS, Harness


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario(harness: Harness, name: str) -> None:
    """The named scenario (see its docstring in threadmill_core.testing.scenarios) holds."""
    SCENARIOS[name](harness)
