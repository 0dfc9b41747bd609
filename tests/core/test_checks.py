"""`threadmill_core.checks`: the shared argument checks stay where backends first found them."""

from __future__ import annotations

import pytest

from threadmill_core import backend, checks

#: What `threadmill_core.backend` offered before the checks had a module of their own.
MOVED = (
    "PURGEABLE_STATUSES",
    "check_calls",
    "check_decision",
    "check_limit",
    "check_offset",
    "check_purgeable",
    "check_records",
    "check_window",
    "queue_names",
    "ttl_ms",
)


@pytest.mark.parametrize("name", MOVED)
def test_each_check_is_importable_from_both_modules(name: str) -> None:
    """Each check is public in `checks` and re-exported, the same object, by `backend`."""
    assert name in checks.__all__
    assert name in backend.__all__
    assert getattr(backend, name) is getattr(checks, name)
