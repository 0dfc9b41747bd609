"""A task module as a deploy adds it: only the workers started after the deploy load it."""

from __future__ import annotations

import os

from tests.worker.recording_tasks import _log
from threadmill_core import TaskContext, task


@task
def added_in_the_deploy(context: TaskContext, url: str, tag: str) -> int:
    """Record its run; returns the pid of the worker process that ran it."""
    _log(url, tag, "start", 3, context.attempt)
    return os.getpid()
