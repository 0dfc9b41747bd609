"""The django-tasks-db peer's task, a plain ``@django.tasks.task``: INCR the Redis counter."""

from __future__ import annotations

from django.tasks import task

from benchmarks.peers import _common as common


@task
def incr() -> None:
    common.incr()
