"""`import_tasks.where`, from a module that starts a thread when imported (as some libraries do).

A process with a thread besides its main one cannot be forked safely, so a
supervisor that imported this module spawns its worker processes.
"""

from __future__ import annotations

import threading

from tests.worker.import_tasks import where

__all__ = ["where"]

threading.Thread(target=threading.Event().wait, name="started-by-import", daemon=True).start()
