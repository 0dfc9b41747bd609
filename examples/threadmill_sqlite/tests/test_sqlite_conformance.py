"""The conformance kit (`threadmill_core.testing`), all of it, run on the SQLite backend.

The ``threadmill`` pytest plugin supplies the tests; this module opts in,
and `threadmill_harness_factory` in conftest.py says what to test: each test
runs twice, on a fake clock, where the kit compares every timestamp, and on
SQLite's own clock, shifted forward.
"""

from threadmill_core.testing import ConformanceSuite


class TestSQLiteConformance(ConformanceSuite):
    """The state machine, race scenarios, payload fidelity and bad input, on SQLite."""
