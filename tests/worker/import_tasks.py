"""A task that says which process imported its module, and which process runs it.

A worker process forked from the supervisor inherits the supervisor's import
of this module; a spawned one imports it itself.
"""

from __future__ import annotations

import os

from threadmill_core import task

#: The process that ran this module's import.
IMPORTED_IN = os.getpid()


@task
def where() -> list[int]:
    """[the pid that imported this module, the pid running the task]."""
    return [IMPORTED_IN, os.getpid()]
