"""A task for the live-workers tests: it runs until its file appears, so a test holds it."""

from __future__ import annotations

import os
import time

from threadmill_core import task


@task(queue="live")
def hold(release_file: str) -> str:
    """Run until `release_file` exists (at most a minute); return its path."""
    deadline = time.monotonic() + 60
    while not os.path.exists(release_file) and time.monotonic() < deadline:
        time.sleep(0.02)
    return release_file
