"""A task module whose import takes a while: a stop can come while the supervisor imports it.

Its import writes the file named by ``THREADMILL_TEST_IMPORTING`` (when set),
then sleeps, so a test knows the import is under way before it signals.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from threadmill_core import task

_marker = os.environ.get("THREADMILL_TEST_IMPORTING")
if _marker:
    Path(_marker).write_text(str(os.getpid()))
    time.sleep(2)


@task
def nothing() -> None:
    """Never enqueued: the module is here for its import."""
