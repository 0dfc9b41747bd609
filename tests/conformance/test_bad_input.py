"""Bad arguments at the storage interface, run on every registered backend."""

import pytest

from threadmill_core.testing import BAD_INPUT_CASES, Harness


@pytest.mark.parametrize("case", sorted(BAD_INPUT_CASES))
def test_bad_argument_is_refused_and_changes_nothing(harness: Harness, case: str) -> None:
    """A bad argument raises its documented exception before anything changes."""
    BAD_INPUT_CASES[case](harness)
