"""Tasks whose module notes, when imported, what the process setup had done by then."""

from __future__ import annotations

import os

from tests.worker import process_setup
from threadmill_core import task

#: What `process_setup.prepare` had recorded when this module was imported.
PREPARED_AT_IMPORT = process_setup.STATE.get("marker")


@task
def report() -> list[object]:
    return [PREPARED_AT_IMPORT, os.getpid()]
