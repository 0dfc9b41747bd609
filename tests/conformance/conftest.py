"""The kit's one fixture, for the bundled backends: the registry's factory, once per backend.

This is exactly how a third-party backend opts in (see
docs/writing-a-backend.md): a ``threadmill_harness_factory`` fixture here and
a `ConformanceSuite` subclass in test_conformance.py. The factory comes from
the backend registry in tests/conftest.py, whose parameters carry the
``memory``, ``fakeredis`` and ``redis`` markers.
"""

import pytest

from threadmill_core.testing import HarnessFactory


@pytest.fixture
def threadmill_harness_factory(harness_factory: HarnessFactory) -> HarnessFactory:
    """The backend under test: each bundled backend in turn."""
    return harness_factory
