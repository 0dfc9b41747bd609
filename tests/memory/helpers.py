"""Helpers shared by the memory backend's tests (conftest is for fixtures)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from threadmill_core.ids import new_task_id
from threadmill_core.models import TaskResult

RESULT_TTL = timedelta(hours=1)
LEASE = timedelta(seconds=30)


def make_task(**fields: Any) -> TaskResult:
    """A record as a producer hands it to `enqueue`."""
    fields.setdefault("id", new_task_id())
    fields.setdefault("task_path", "tests.memory.tasks:noop")
    return TaskResult(**fields)
