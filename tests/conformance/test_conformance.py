"""The conformance kit, run on every bundled backend as any third-party backend runs it."""

from threadmill_core.testing import ConformanceSuite


class TestConformance(ConformanceSuite):
    """Every test of the kit, once per backend of the registry in tests/conftest.py."""
