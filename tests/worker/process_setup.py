"""Setup callables for `WorkerSettings.setup`, as an integration would write them."""

from __future__ import annotations

import os

#: What this process's setup did (a module global: each spawned process has its own).
STATE: dict[str, object] = {}


def prepare(marker: str) -> None:
    STATE["marker"] = marker


def fail_outside(pid: int) -> None:
    """Succeed in process `pid` (the supervisor), fail in any other (a worker process)."""
    if os.getpid() != pid:
        raise RuntimeError("this process cannot be prepared")
