"""The examples of README.md and docs/*.md are tests: see tests/docs/examples.py.

This file sits at the top of the repository because pytest asks only the
conftest files above a path how to collect it. The tests' own fixtures live
in tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

try:
    from tests.docs.examples import DocsRedis, documents
except ImportError as exc:  # Sybil is in the `test` extra; the floors venv of .ci/run has not it
    if exc.name != "sybil":
        raise
    collect_ignore = ["README.md", "docs"]
else:
    pytest_collect_file = documents().pytest()

    @pytest.fixture(scope="session")
    def docs_redis() -> Iterator[DocsRedis]:
        """The documents' redis-server, started when an example first needs it."""
        server = DocsRedis()
        try:
            yield server
        finally:
            server.close()
