"""The conformance state machine, run on every registered backend."""

from threadmill_core.testing import HarnessFactory, run_machine


def test_backend_matches_the_model(harness_factory: HarnessFactory) -> None:
    """Every sequence of operations leaves the backend answering exactly as the model does."""
    run_machine(harness_factory)
